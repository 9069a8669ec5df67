"""SkillDuet's OPD term in verl's distillation-loss registry (``loss_mode=skillduet_opd``): registered by the plugin
in a fresh process, and verl's own ``distillation_ppo_loss`` with it gives the same loss and gradient as the
``skillduet_sync`` engine loss on the same batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("verl")

from tensordict import TensorDict  # noqa: E402

from fakes import loss_settings  # noqa: E402
from skillduet_plugin.integrations.verl.batch import nested  # noqa: E402
from skillduet_plugin.integrations.verl.loss import OPD_MASK_KEY, TEACHER_LOGPROBS_KEY, skillduet_ppo_loss  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROMPT_LENS = [3, 2, 4]
RESP_LENS = [4, 2, 3]


def actor_config():
    from verl.workers.config import FSDPActorConfig

    return FSDPActorConfig(strategy="fsdp", ppo_mini_batch_size=3, ppo_micro_batch_size_per_gpu=3, rollout_n=1,
                           use_kl_loss=False, entropy_coeff=0.0, loss_agg_mode="token-mean")


def distillation_config(coef: float, clamp: float | None, policy_gradient: bool = False):
    from types import SimpleNamespace

    import skillduet_plugin.integrations.verl.distillation  # noqa: F401  (the plugin imports it inside verl)
    from verl.workers.config import DistillationLossConfig

    loss = DistillationLossConfig(loss_mode="skillduet_opd", use_task_rewards=True, distillation_loss_coef=coef,
                                  use_policy_gradient=policy_gradient, loss_max_clamp=clamp)
    return SimpleNamespace(distillation_loss=loss, enabled=True)


def batch(seed=0, far_token=False, rows=None, dp_size=1, batch_num_tokens="all"):
    """One micro-batch in both layouts: the plugin's response-layout teacher and verl's full-sequence one.
    ``rows``: a micro-batch of those rows only (the same numbers as in the whole batch); ``batch_num_tokens``: the
    batch's response tokens by default (verl's global batch info), or None (none)."""
    from verl.utils import tensordict_utils as tu

    g = torch.Generator().manual_seed(seed)
    full = [-(torch.rand(p + r, generator=g) * 3 + 0.1) for p, r in zip(PROMPT_LENS, RESP_LENS)]
    leaf = torch.cat(full).requires_grad_(True)
    lens = [p + r for p, r in zip(PROMPT_LENS, RESP_LENS)]
    offsets = torch.tensor([0] + torch.cumsum(torch.tensor(lens), 0).tolist())
    log_probs = torch.nested.nested_tensor_from_jagged(leaf, offsets=offsets)
    student = [f[p - 1: p - 1 + r] for f, p, r in zip(full, PROMPT_LENS, RESP_LENS)]
    teacher = [s + torch.randn(s.shape, generator=g) for s in student]
    if far_token:
        teacher[0][1] = student[0][1] + 14.0  # |g (t - s)| > verl's default clamp of 10
    verl_teacher = []
    for f, t, p in zip(full, teacher, PROMPT_LENS):
        row = torch.zeros(len(f), 1)
        row[p - 1: p - 1 + len(t), 0] = t
        verl_teacher.append(row)
    old = [s.detach() + 0.05 * torch.randn(s.shape, generator=g) for s in student]
    adv = [torch.randn(r, generator=g) for r in RESP_LENS]
    mask = [torch.ones(r) for r in RESP_LENS]
    mask[0][-1] = 0.0  # an environment token
    n_tokens = int(sum(m.sum() for m in mask)) if batch_num_tokens == "all" else batch_num_tokens
    if rows is not None:
        keep = list(rows)
        full, teacher, verl_teacher, mask, old, adv = ([x[i] for i in keep] for x in
                                                       (full, teacher, verl_teacher, mask, old, adv))
        prompt_lens, resp_lens = [PROMPT_LENS[i] for i in keep], [RESP_LENS[i] for i in keep]
        leaf = torch.cat(full).detach().requires_grad_(True)
        lens = [p + r for p, r in zip(prompt_lens, resp_lens)]
        offsets = torch.tensor([0] + torch.cumsum(torch.tensor(lens), 0).tolist())
        log_probs = torch.nested.nested_tensor_from_jagged(leaf, offsets=offsets)
    else:
        prompt_lens, resp_lens = PROMPT_LENS, RESP_LENS
    td = TensorDict({
        "prompts": nested([torch.arange(p) for p in prompt_lens]),
        "responses": nested([torch.arange(r) for r in resp_lens]),
        "response_mask": nested(mask),
        "old_log_probs": nested(old),
        "advantages": nested(adv),
        TEACHER_LOGPROBS_KEY: nested(teacher),
        OPD_MASK_KEY: nested([torch.ones(r) for r in resp_lens]),  # every row has a Local skill
        "teacher_logprobs": torch.nested.as_nested_tensor(verl_teacher, layout=torch.jagged),
    }, batch_size=len(resp_lens))
    tu.assign_non_tensor(td, dp_size=dp_size, batch_num_tokens=n_tokens, global_batch_size=None if rows else 3)
    return td, {"log_probs": log_probs}, leaf


@pytest.mark.parametrize("coef", [0.1, 1.0])
def test_registered_loss_and_plugin_loss_give_the_same_gradient(coef):
    from verl.trainer.distillation.losses import distillation_ppo_loss

    td, out, leaf = batch(far_token=True)
    ours, our_metrics = skillduet_ppo_loss(actor_config(), out, td, **loss_settings(opd_coef=coef))
    theirs, metrics = distillation_ppo_loss(actor_config(), distillation_config(coef, None), out, td)
    assert torch.allclose(ours, theirs, atol=1e-6)
    assert metrics["distillation/loss"].aggregate() == pytest.approx(
        our_metrics["skillduet/opd_loss"].aggregate(), abs=1e-6)
    (g_ours,) = torch.autograd.grad(ours, leaf, retain_graph=True)
    (g_theirs,) = torch.autograd.grad(theirs, leaf)
    assert g_ours.abs().max() > 1e-3
    assert torch.allclose(g_ours, g_theirs, atol=1e-6)
    assert 0.0 < metrics["distillation/skillduet_gate_mean"].aggregate() < 1.0


def test_verl_default_clamp_changes_the_gradient_negative_control():
    """verl clamps per-token distillation losses to +-10 by default: on a token with g (t - s) > 10 the gradients
    differ, which is why the docs say loss_max_clamp=null (and why the test above can fail)."""
    from verl.trainer.distillation.losses import distillation_ppo_loss

    td, out, leaf = batch(far_token=True)
    ours, _ = skillduet_ppo_loss(actor_config(), out, td, **loss_settings(opd_coef=1.0))
    theirs, _ = distillation_ppo_loss(actor_config(), distillation_config(1.0, 10.0), out, td)
    (g_ours,) = torch.autograd.grad(ours, leaf, retain_graph=True)
    (g_theirs,) = torch.autograd.grad(theirs, leaf)
    assert not torch.allclose(g_ours, g_theirs, atol=1e-4)


GATE_KEYS = ("distillation/skillduet_gate_mean", "distillation/skillduet_gate_active_ratio")


def _by_hand_gate_stats():
    """The gate's token means over every response token of the whole batch, from the batch's own numbers."""
    from skillduet_plugin.integrations.verl.distillation import GATE_BETA

    td, out, leaf = batch()
    gaps, start = [], 0
    for i, (p, r) in enumerate(zip(PROMPT_LENS, RESP_LENS)):
        student = leaf.detach()[start + p - 1: start + p - 1 + r]
        keep = td["response_mask"][i].bool()
        gaps.append((td[TEACHER_LOGPROBS_KEY][i] - student)[keep])
        start += p + r
    gaps = torch.cat(gaps)
    return {GATE_KEYS[0]: torch.sigmoid(GATE_BETA * gaps).mean().item(), GATE_KEYS[1]: (gaps > 0).float().mean().item()}


def _registry_logged(splits, *, dp_size, global_info=True):
    """The registry loss's gate metrics as verl's logger gets them: SUM summed over micro-batches with the ranks
    averaged, MEAN the mean of the micro-batch values."""
    from verl.trainer.distillation.losses import distillation_ppo_loss
    from verl.utils.metric import AggregationType

    parts: dict[str, list] = {}
    for idx in splits:
        td, out, _ = batch(rows=idx, dp_size=dp_size, batch_num_tokens="all" if global_info else None)
        _, metrics = distillation_ppo_loss(actor_config(), distillation_config(1.0, None), out, td)
        for key in GATE_KEYS:
            parts.setdefault(key, []).append((float(metrics[key].aggregate()), metrics[key].aggregation))
    return {k: sum(v for v, _ in p) / (dp_size if p[0][1] == AggregationType.SUM else len(p)) for k, p in parts.items()}


@pytest.mark.parametrize("splits,dp_size", [([[0, 1, 2]], 1), ([[0], [1, 2]], 1), ([[1], [2, 0]], 1),
                                            ([[0], [1], [2]], 3), ([[0, 2], [1]], 2)])
def test_registry_gate_statistics_are_token_means_over_the_whole_batch(splits, dp_size):
    """As the engine loss's: the logged gate statistics are the batch's token means (by hand) whichever rows verl
    puts into a micro-batch or onto a rank."""
    want = _by_hand_gate_stats()
    assert _registry_logged(splits, dp_size=dp_size) == pytest.approx(want, rel=1e-5, abs=1e-7)
    assert 0.05 < want[GATE_KEYS[1]] < 0.95


def test_registry_negative_control_micro_batch_means_move_with_the_grouping():
    """Without global batch info each micro-batch logs its own means, averaged: 3 vs 5 response tokens move that
    away from the batch's token mean (what the registry loss logged for every grouping before)."""
    want = _by_hand_gate_stats()
    got = _registry_logged([[0], [1, 2]], dp_size=1, global_info=False)
    assert abs(got[GATE_KEYS[0]] - want[GATE_KEYS[0]]) > 1e-3


def test_policy_gradient_mode_is_refused_with_the_fix():
    from verl.trainer.distillation.losses import distillation_ppo_loss

    td, out, _ = batch()
    cfg = distillation_config(1.0, None, policy_gradient=True)
    with pytest.raises(ValueError, match="use_policy_gradient=false"):
        distillation_ppo_loss(actor_config(), cfg, out, td)


def test_plugin_registers_the_loss_in_a_fresh_process():
    """``import verl`` (the entry point) plus verl's own import of its distillation package registers the name;
    verl's loss config then accepts it."""
    probe = textwrap.dedent("""
        import json, verl
        from verl.workers.config import DistillationLossConfig
        cfg = DistillationLossConfig(loss_mode="skillduet_opd", use_policy_gradient=False)
        from skillduet_plugin.integrations.verl.plugin import FAILURES, registration_status
        print("RESULT" + json.dumps({"use_estimator": cfg.loss_settings.use_estimator, "failures": FAILURES,
                                     "status": registration_status()}))
    """)
    env = dict(os.environ, VERL_USE_EXTERNAL_PLUGINS="auto", PYTHONPATH=REPO)
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT"))
    result = json.loads(line[len("RESULT"):])
    assert result["use_estimator"] is True and result["failures"] == []
    assert result["status"]["distillation_loss:skillduet_opd"] is True
