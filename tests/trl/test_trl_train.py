"""Whole training runs of SkillDuetGRPOTrainer on the tiny model: end to end, resume, ablations, config."""

from __future__ import annotations

import shutil

import pytest
import torch
from trl_helpers import group_rows

from skillduet_plugin.config import ConfigError, preset
from skillduet_plugin.integrations.trl import SNAPSHOT_DIRNAME, make_env_reward, task_dataset
from skillduet_plugin.envs.toy import TOY_TASKS, ToyEnv
from skillduet_plugin.skills.bank import BANK_FILENAME, SkillBank
from skillduet_plugin.skills.inject import GLOBAL_HEADER


def _train_steps(history):
    return [h for h in history if h["mode"] == "train"]


def _globals(bank_path):
    bank = SkillBank(bank_path, readonly=True)
    try:
        return [(v.scope, v.version, v.step, v.text) for v in bank.history()]
    finally:
        bank.close()


@pytest.mark.slow
def test_end_to_end_then_resume_reproduces_the_schedule(make_trainer, tmp_path):
    common = dict(max_steps=4, save_strategy="steps", save_steps=2, max_completion_length=64, max_turns=2,
                  skillduet={"consolidation_interval": 2, "opd_coef": 0.2})
    run_a = make_trainer(out_dir=tmp_path / "a", **common)
    run_a.train()
    hist_a = _train_steps(run_a.rollout_history)
    assert [h["step"] for h in hist_a] == [1, 2, 3, 4]
    # The Global is consolidated after step 2 (interval 2) and guides steps 3-4; steps 1-2 ran without one.
    assert all(v is None for h in hist_a[:2] for v in h["global_versions"])
    assert all(v == 1 for h in hist_a[2:] for v in h["global_versions"])
    bank_a = tmp_path / "a" / BANK_FILENAME
    versions_a = _globals(bank_a)
    assert {(scope, version, step) for scope, version, step, _ in versions_a} >= {
        (TOY_TASKS[t][0], 1, 2) for t in hist_a[0]["task_ids"] + hist_a[1]["task_ids"]}
    assert (tmp_path / "a" / "checkpoint-2" / SNAPSHOT_DIRNAME / BANK_FILENAME).is_file()
    last = run_a.last_rollout["episodes"][0]
    assert GLOBAL_HEADER in last.student_messages[-1]["content"]
    assert GLOBAL_HEADER not in last.prompt_messages[-1]["content"]
    logged = {k for entry in run_a.state.log_history for k in entry}
    assert {"opd/loss", "opd/gate_mean", "skills/local_extracted", "env/won"} <= logged

    # Resume from step 2 in a fresh folder: the bank comes from the checkpoint, not from run A's live bank.
    (tmp_path / "b").mkdir()
    shutil.copytree(tmp_path / "a" / "checkpoint-2", tmp_path / "b" / "checkpoint-2")
    run_b = make_trainer(out_dir=tmp_path / "b", **common)
    run_b.train(resume_from_checkpoint=str(tmp_path / "b" / "checkpoint-2"))
    hist_b = _train_steps(run_b.rollout_history)
    assert [h["step"] for h in hist_b] == [3, 4]
    assert [h["task_ids"] for h in hist_b] == [h["task_ids"] for h in hist_a[2:]]
    assert [h["global_versions"] for h in hist_b] == [h["global_versions"] for h in hist_a[2:]]
    assert _globals(tmp_path / "b" / BANK_FILENAME) == versions_a
    for pa, pb in zip(run_a.model.parameters(), run_b.model.parameters()):
        torch.testing.assert_close(pa, pb, atol=1e-6, rtol=0)  # same data, Global and samples: same weights


def test_resume_without_a_bank_snapshot_fails_clearly(make_trainer, tmp_path):
    trainer = make_trainer(out_dir=tmp_path / "c")
    (tmp_path / "c" / "checkpoint-1").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="skill bank snapshot"):
        trainer.train(resume_from_checkpoint=str(tmp_path / "c" / "checkpoint-1"))


def test_plain_grpo_preset_skips_every_skill_pass(make_trainer, monkeypatch):
    trainer = make_trainer(skillduet=preset("grpo").to_dict(), max_steps=1, max_completion_length=48)
    assert trainer.lifecycle is None

    def forbidden(*args, **kwargs):
        raise AssertionError("plain GRPO must not run the analyzer, teacher or scoring pass")

    for name in ("_extract", "_teacher_logps", "_score", "_base_logps"):
        monkeypatch.setattr(trainer, name, forbidden)
    trainer.train()
    logged = {k for entry in trainer.state.log_history for k in entry}
    assert "loss" in logged and not any(k.startswith(("opd/", "skills/")) for k in logged)


def test_ablations_come_from_config_alone(make_trainer, monkeypatch):
    # Local-only: OPD with Local skills, no Global in prompts, no scoring for consolidation.
    local_only = make_trainer(skillduet=preset("local_only").to_dict(), max_completion_length=48)
    local_only.model.train()
    monkeypatch.setattr(local_only.lifecycle, "score", lambda *a, **k: pytest.fail("Local-only scores nothing"))
    batch = local_only._generate_and_score_completions(group_rows(local_only, 0))
    assert batch["opd_mask"].sum() > 0
    assert all(v is None for v in local_only.rollout_history[-1]["global_versions"])
    monkeypatch.setattr(local_only.lifecycle, "end_step", lambda *a: pytest.fail("Local-only consolidates nothing"))
    local_only.skillduet_end_step(local_only.skillduet.consolidation_interval)

    # opd_coef=0: extraction and scoring still run (the Global evolves), no OPD tensors reach the loss.
    no_opd = make_trainer(out_dir=local_only.args.output_dir + "-noopd", skillduet={"opd_coef": 0.0},
                          max_completion_length=48)
    no_opd.model.train()
    scored = []
    original = no_opd.lifecycle.score
    monkeypatch.setattr(no_opd.lifecycle, "score", lambda *a, **k: scored.append(1) or original(*a, **k))
    batch = no_opd._generate_and_score_completions(group_rows(no_opd, 0))
    assert scored and not any(k.startswith("opd_") for k in batch)

    # The selector reaches the lifecycle unchanged.
    rnd = make_trainer(out_dir=local_only.args.output_dir + "-rnd", skillduet=preset("random").to_dict())
    assert rnd.lifecycle.config.selector == "random"


def test_config_errors_name_the_field(tmp_path):
    from trl_helpers import small_args

    with pytest.raises(ConfigError, match=r"skillduet\.selector='best'"):
        small_args(tmp_path, skillduet={"selector": "best"})
    with pytest.raises(ConfigError, match=r"^unknown setting\(s\) skillduet\.opd_lambda: allowed keys of skillduet "):
        small_args(tmp_path, skillduet={"opd_lambda": 0.1})
    with pytest.raises(ConfigError, match="teacher_at='later'"):
        small_args(tmp_path, teacher_at="later")
    with pytest.raises(ConfigError, match="env_name='atari' is invalid: allowed values are alfworld, toy, webshop"):
        small_args(tmp_path, env_name="atari")
    with pytest.raises(ConfigError, match="max_turns=0"):
        small_args(tmp_path, max_turns=0)
    with pytest.raises(ConfigError, match="invalid_action_penalty=-1"):
        small_args(tmp_path, invalid_action_penalty=-1)
    with pytest.raises(ConfigError, match="vllm_mode='server' is invalid: the SkillDuet rollout generates"):
        small_args(tmp_path, use_vllm=True, vllm_mode="server")
    assert small_args(tmp_path, use_vllm=False, vllm_mode="server").vllm_mode == "server"  # only checked with vLLM
    args = small_args(tmp_path, skillduet={"selector": "utility"})
    assert args.skillduet_config.selector == "utility" and args.skillduet["selector"] == "utility"
    assert args.skill_bank_dir == str(tmp_path)
    assert args.to_dict()["skillduet"]["selector"] == "utility"  # stays plain data for TRL's logging


def test_task_dataset_and_env_reward():
    ds = task_dataset(ToyEnv(), repeat=2)
    assert ds.column_names == ["prompt", "task_id", "scope"]
    assert ds["task_id"] == list(TOY_TASKS) * 2
    assert ds["scope"][:4] == ["open", "open", "open", "fetch"]
    reward = make_env_reward(invalid_action_penalty=0.1, reward_scale=10.0)
    assert reward([], [], env_reward=[1.0, 0.0], invalid_actions=[0, 3]) == pytest.approx([10.0, -0.3])
    with pytest.raises(KeyError, match="env_reward"):
        reward([], [])


def test_micro_batches_accumulate_to_the_whole_batch_update(make_trainer, tmp_path):
    """One generation batch of 4 rollouts trained whole and in two accumulated slices of 2 (what the runner's
    micro_batch sets): the same rollouts and, with plain SGD (update = -lr x gradient), the same update, GRPO
    and OPD together. Negative control: the two slices as two optimizer steps move the weights otherwise."""
    common = dict(max_steps=1, max_completion_length=64, max_turns=2, optim="sgd", learning_rate=1.0,
                  skillduet={"opd_coef": 1.0, "use_global": False})
    start = make_trainer(out_dir=tmp_path / "start", **common).model
    runs = {}
    for name, extra in {"whole": {}, "sliced": dict(per_device_train_batch_size=2, gradient_accumulation_steps=2,
                                                    steps_per_generation=2),
                        "two_steps": dict(per_device_train_batch_size=2, steps_per_generation=2, max_steps=2)}.items():
        trainer = make_trainer(out_dir=tmp_path / name, **{**common, **extra})
        trainer.train()
        runs[name] = trainer
    assert runs["whole"].rollout_history[0]["task_ids"] == runs["sliced"].rollout_history[0]["task_ids"]
    updates = {name: [b - a for a, b in zip(start.parameters(), t.model.parameters())] for name, t in runs.items()}
    scale = max(u.abs().max().item() for u in updates["whole"])
    assert scale > 1e-4
    for a, b in zip(updates["whole"], updates["sliced"]):
        torch.testing.assert_close(a, b, atol=1e-5 * scale, rtol=1e-3)
    assert max((a - b).abs().max().item() for a, b in zip(updates["whole"], updates["two_steps"])) > 1e-2 * scale


def test_micro_batches_give_the_same_strength_scores(make_trainer, tmp_path):
    """Strength read from the teacher pass (heldout=teacher) captures its rows in the loss forwards: with the
    batch in two accumulated slices every row is still captured before the step's scores are finished."""
    common = dict(max_steps=1, max_completion_length=64, max_turns=2, skillduet={"consolidation_interval": 1})
    scores = {}
    for name, extra in {"whole": {}, "sliced": dict(per_device_train_batch_size=2, gradient_accumulation_steps=2,
                                                    steps_per_generation=2)}.items():
        trainer = make_trainer(out_dir=tmp_path / name, **{**common, **extra})
        assert trainer.skillduet.scores_from_teacher_pass
        trainer.train()
        scores[name] = {c.skill_id: c.scores.get("strength") for c in trainer.lifecycle.bank.candidates()}
    assert any(v is not None for v in scores["whole"].values())  # scored within the step's scoring budget
    assert scores["whole"].keys() == scores["sliced"].keys()
    for key, value in scores["whole"].items():
        if value is None:
            assert scores["sliced"][key] is None, key
        else:
            assert scores["sliced"][key] == pytest.approx(value, rel=1e-4, abs=1e-6), key


def test_update_share_of_accumulated_micro_batches_is_the_whole_batch_share(make_trainer, tmp_path):
    """opd/update_share (and the two norms) is logged once per optimizer step from the gradients summed over its
    micro-batches: trained in two accumulated slices it equals the whole batch's (whose update it is), not the
    mean of the slices' own shares."""
    common = dict(max_steps=1, max_completion_length=64, max_turns=2, logging_steps=1, opd_update_share=True,
                  skillduet={"opd_coef": 1.0, "use_global": False})
    logged = {}

    def spread(prompts, completions, **_):  # rewards that differ within the group, so GRPO's term is not zero
        return [float(i % 2) for i in range(len(completions))]

    for name, extra in {"whole": {}, "sliced": dict(per_device_train_batch_size=2, gradient_accumulation_steps=2,
                                                    steps_per_generation=2)}.items():
        trainer = make_trainer(out_dir=tmp_path / name, trainer_kwargs={"reward_funcs": [spread]},
                               **{**common, **extra})
        trainer.train()
        logs = [h for h in trainer.state.log_history if "opd/update_share" in h]
        assert len(logs) == 1, logs
        logged[name] = logs[0]
    for key in ("opd/update_share", "opd/update_norm_policy", "opd/update_norm_opd"):
        assert logged["sliced"][key] == pytest.approx(logged["whole"][key], rel=1e-3), key
    assert 0.01 < logged["whole"]["opd/update_share"] < 0.99, logged["whole"]


def test_grad_share_sums_micro_batch_gradients_before_the_norm():
    """GradShare against autograd on the whole batch; negative control: the mean of per-slice shares, which is
    what appending one value per micro-batch logged before, is another number on the same slices."""
    from skillduet_plugin.core.update_share import GradShare

    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2)
    x = torch.randn(4, 3)
    w_policy, w_opd = torch.tensor([1.0, -2.0]), torch.tensor([[1.0, 0.5], [-3.0, 1.0], [2.0, -1.0], [-1.0, 2.0]])

    def terms(rows):
        out = net(x[rows])
        return (out * w_policy).sum(), (out * w_opd[rows]).sum()

    policy, opd = terms(slice(0, 4))
    g_policy = torch.autograd.grad(policy, list(net.parameters()), retain_graph=True)
    g_opd = torch.autograd.grad(opd, list(net.parameters()))
    norm = lambda gs: float(torch.sqrt(sum((g ** 2).sum() for g in gs)))  # noqa: E731
    expected = norm(g_opd) / (norm(g_policy) + norm(g_opd))

    acc = GradShare()
    assert acc.add(net, *terms(slice(0, 2)), last=False) == {}
    got = acc.add(net, *terms(slice(2, 4)), last=True)
    assert got["opd/update_share"] == pytest.approx(expected, rel=1e-6)
    assert got["opd/update_norm_policy"] == pytest.approx(norm(g_policy), rel=1e-6)
    assert got["opd/update_norm_opd"] == pytest.approx(norm(g_opd), rel=1e-6)
    per_slice = [GradShare().add(net, *terms(rows), last=True)["opd/update_share"]
                 for rows in (slice(0, 2), slice(2, 4))]
    assert abs(sum(per_slice) / 2 - expected) > 1e-2
    assert acc.add(net, *terms(slice(0, 4)), last=True)["opd/update_share"] == pytest.approx(expected, rel=1e-6)
