"""The real single-controller path on CPU: a Ray ``ActorRolloutRefWorker`` (its inner ``TrainingWorker`` runs
verl's FSDP2 engine) with the test-only CPU platform shim computes log-probs and trains one step with the
SkillDuet loss on the tiny model."""

from __future__ import annotations

import math
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("verl")
ray = pytest.importorskip("ray")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_actor_worker_log_probs_and_opd_training_step(tiny_model_dir, monkeypatch):
    from skillduet_testing.verl_cpu import cpu_env

    for key, value in cpu_env().items():
        monkeypatch.setenv(key, value)
    from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
    from verl.utils import tensordict_utils as tu
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.engine_workers import ActorRolloutRefWorker

    from skillduet_plugin.core.logprobs import response_logprobs
    from fakes import loss_settings

    from skillduet_plugin.integrations.verl.batch import nested
    from skillduet_plugin.integrations.verl.loss import (OPD_MASK_KEY, TEACHER_LOGPROBS_KEY, make_loss_fn,
                                                         opd_token_weights)
    from skillduet_plugin.integrations.verl.teacher import compute_response_logprobs, logprob_batch
    from skillduet_plugin.main_ppo import compose

    cfg = compose([
        f"actor_rollout_ref.model.path={tiny_model_dir}", "trainer.plugins=[skillduet]",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        "actor_rollout_ref.model.use_remove_padding=False",
        "actor_rollout_ref.actor.strategy=fsdp2", "actor_rollout_ref.ref.strategy=fsdp2",
        "++actor_rollout_ref.actor.fsdp_config.mixed_precision={param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2", "actor_rollout_ref.rollout.n=1",
        "actor_rollout_ref.actor.use_kl_loss=False", "actor_rollout_ref.actor.entropy_coeff=0",
    ])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": cpu_env(REPO)})
    try:
        pool = RayResourcePool([1], use_gpu=False, max_colocate_count=1)
        cls = RayClassWithInitArgs(cls=ray.remote(ActorRolloutRefWorker), config=cfg.actor_rollout_ref,
                                   role="actor")
        wg = RayWorkerGroup(resource_pool=pool, ray_cls_with_init=cls, device_name="cpu")
        wg.init_model()
        actor_cfg = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
        wg.set_loss_fn(make_loss_fn(actor_cfg, **loss_settings(opd_coef=0.5, gate_beta=5.0)))

        contexts = [[5, 6, 7, 8], [9, 10, 11], [5, 6, 7, 8, 12, 13], [14, 15]]
        responses = [[20, 21, 22], [23, 24], [20, 21, 22], [25, 26, 27, 28]]
        # 1. log-probs through the worker (the teacher / scoring path) match an independent HF forward
        before = compute_response_logprobs(wg, contexts, responses, temperature=1.0, dp_size=1)
        from transformers import AutoModelForCausalLM

        reference = response_logprobs(AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval(), contexts,
                                      responses)
        for got, want in zip(before, reference):
            assert torch.allclose(got, want.detach(), atol=1e-4)

        # 2. one training step with the SkillDuet loss: advantages 0 and teacher = student + 1 on rows 0, 2,
        # so the whole loss is lambda * sigmoid(5) * (OPD tokens / response tokens), computable by hand
        td, _ = logprob_batch(contexts, responses, temperature=1.0)
        td["old_log_probs"] = nested(before)
        td["advantages"] = nested([torch.zeros(len(r)) for r in responses])
        td[TEACHER_LOGPROBS_KEY] = nested([x + 1.0 for x in before])
        # the trainer's OPD token weights (N_response / N_supervised on rows 0 and 2): Eq. 1 over the batch
        td[OPD_MASK_KEY] = nested(opd_token_weights([torch.ones(len(r)) for r in responses],
                                                    [i % 2 == 0 for i in range(len(responses))]))
        tu.assign_non_tensor(td, global_batch_size=4, mini_batch_size=4, epochs=1, seed=1,
                             dataloader_kwargs={"shuffle": False}, calculate_entropy=False)
        out = wg.update_actor(td)
        metrics = tu.get(out, "metrics")
        expected = 0.5 / (1 + math.exp(-5))  # lambda * Eq. 1: t - s = 1 on every supervised token
        assert sum(metrics["loss"]) == pytest.approx(expected, rel=1e-4)
        assert sum(metrics["actor/pg_loss"]) == pytest.approx(0.0, abs=1e-7)
        assert sum(metrics["skillduet/opd_loss"]) == pytest.approx(expected / 0.5, rel=1e-4)

        # 3. the step moved the weights towards the teacher on the supervised rows
        after = compute_response_logprobs(wg, contexts, responses, temperature=1.0, dp_size=1)
        assert (after[0] - before[0]).mean() > 0 and (after[2] - before[2]).mean() > 0
    finally:
        ray.shutdown()
