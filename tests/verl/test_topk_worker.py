"""``skillduet.opd_estimator=topk`` through verl's real FSDP2 engine on CPU: the teacher pass returns the top-k of
every response position (equal to an independent transformers forward), and one update with the flag verl's own
top-k distillation sets (``distillation_use_topk``) trains on Eq. 1's expected term, whose value is recomputed from
the same forward outside verl."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("verl")
ray = pytest.importorskip("ray")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
K = 4


def _independent(model, contexts, responses, teacher_top, weights):
    """Eq. 1's expected term (core.opd.opd_expected) over the teacher's ids, weighted token mean as the trainer's
    weights make it: the OPD loss the update should report."""
    from skillduet_plugin.core.opd import opd_expected

    num, den = 0.0, 0.0
    with torch.no_grad():
        for ctx, resp, (ids, logps), w in zip(contexts, responses, teacher_top, weights):
            logits = model(torch.tensor([ctx + resp])).logits[0].float()
            rows = torch.log_softmax(logits[len(ctx) - 1: len(ctx) - 1 + len(resp)], -1).gather(-1, ids)
            per, _ = opd_expected(rows, logps, beta=5.0)
            num += float((per * w).sum())
            den += float(w.numel())
    return num / den


@pytest.mark.slow
def test_topk_teacher_pass_and_update_through_the_engine(tiny_model_dir, monkeypatch):
    from skillduet_testing.verl_cpu import cpu_env

    for key, value in cpu_env().items():
        monkeypatch.setenv(key, value)
    from transformers import AutoModelForCausalLM
    from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
    from verl.utils import tensordict_utils as tu
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.engine_workers import ActorRolloutRefWorker

    from fakes import loss_settings

    from skillduet_plugin.integrations.verl.batch import nested
    from skillduet_plugin.integrations.verl.loss import OPD_MASK_KEY, make_loss_fn, opd_token_weights
    from skillduet_plugin.integrations.verl.teacher import compute_response_logprobs, logprob_batch
    from skillduet_plugin.integrations.verl.topk import TEACHER_TOPK_IDS_KEY, TEACHER_TOPK_LOGPROBS_KEY, flat_rows
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
        "actor_rollout_ref.actor.optim.lr=1e-3",
    ])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": cpu_env(REPO)})
    try:
        pool = RayResourcePool([1], use_gpu=False, max_colocate_count=1)
        cls = RayClassWithInitArgs(cls=ray.remote(ActorRolloutRefWorker), config=cfg.actor_rollout_ref,
                                   role="actor")
        wg = RayWorkerGroup(resource_pool=pool, ray_cls_with_init=cls, device_name="cpu")
        wg.init_model()
        actor_cfg = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
        wg.set_loss_fn(make_loss_fn(actor_cfg, **loss_settings(opd_coef=1.0, estimator="topk", topk=K)))
        model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()

        teacher_ctx = [[5, 6, 7, 8, 30, 31], [9, 10, 11, 32], [5, 6, 7, 8, 12, 13, 33], [14, 15, 34]]
        student_ctx = [c[:-1] for c in teacher_ctx]  # the teacher prompt = the student prompt + a "skill" token
        responses = [[20, 21, 22], [23, 24], [20, 21, 22], [25, 26, 27, 28]]
        # 1. the teacher pass: sampled log-probs and the top-k of each response position, as transformers says
        served = compute_response_logprobs(wg, teacher_ctx, responses, temperature=1.0, dp_size=2, topk=K)
        with torch.no_grad():
            for (row, ids, logps), ctx, resp in zip(served, teacher_ctx, responses):
                logits = model(torch.tensor([ctx + resp])).logits[0, len(ctx) - 1: len(ctx) - 1 + len(resp)]
                want = torch.topk(torch.log_softmax(logits.float(), -1), K, dim=-1)
                assert torch.equal(ids, want.indices)
                assert torch.allclose(logps, want.values, atol=1e-4)
                assert torch.allclose(row, torch.log_softmax(logits.float(), -1).gather(
                    -1, torch.tensor(resp)[:, None])[:, 0], atol=1e-4)

        # 2. one update on the student rows with the teacher's top-k: verl's logits-processor path
        top = [(ids, logps) for _, ids, logps in served]
        old = compute_response_logprobs(wg, student_ctx, responses, temperature=1.0, dp_size=2)
        supervised = [True, False, True, True]
        weights = opd_token_weights([torch.ones(len(r)) for r in responses], supervised)
        td, _ = logprob_batch(student_ctx, responses, temperature=1.0)
        td["old_log_probs"] = nested(old)
        td["advantages"] = nested([torch.zeros(len(r)) for r in responses])
        td[TEACHER_TOPK_IDS_KEY] = nested(flat_rows([ids for ids, _ in top]))
        td[TEACHER_TOPK_LOGPROBS_KEY] = nested(flat_rows([logps for _, logps in top]))
        td[OPD_MASK_KEY] = nested(weights)
        tu.assign_non_tensor(td, global_batch_size=4, mini_batch_size=4, epochs=1, seed=1,
                             dataloader_kwargs={"shuffle": False}, calculate_entropy=False,
                             distillation_use_topk=True)
        metrics = tu.get(wg.update_actor(td), "metrics")
        expected = _independent(model, student_ctx, responses, top, weights)
        assert abs(expected) > 1e-4
        assert sum(metrics["skillduet/opd_loss"]) == pytest.approx(expected, rel=1e-4, abs=1e-6)
        assert sum(metrics["actor/pg_loss"]) == pytest.approx(0.0, abs=1e-7)
        assert 0.0 < metrics["skillduet/opd/gate_mean"][0] < 1.0

        # 3. the update changed the weights (the engine backpropagated through the processor's output)
        after = compute_response_logprobs(wg, student_ctx, responses, temperature=1.0, dp_size=2)
        assert any(not torch.allclose(a, b) for a, b in zip(after, old))
    finally:
        ray.shutdown()
