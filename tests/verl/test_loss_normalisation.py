"""The verl OPD term is Eq. 1 over the whole batch however it is split into micro-batches and data-parallel ranks
(checked against an independent full-batch computation), and never NaN on an unsupervised micro-batch."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("verl")

from tensordict import TensorDict  # noqa: E402

from fakes import loss_settings  # noqa: E402
from skillduet_plugin.integrations.verl.batch import nested  # noqa: E402
from skillduet_plugin.integrations.verl.loss import (OPD_MASK_KEY, TEACHER_LOGPROBS_KEY,  # noqa: E402
                                                     skillduet_ppo_loss)

# (prompt_len, response_len, supervised): 18 supervised tokens in the first two rows, 48 in the last two
ROWS = [(3, 10, True), (2, 8, True), (4, 24, True), (3, 24, True), (2, 6, False)]
BETA = 5.0


def actor_config():
    from verl.workers.config import FSDPActorConfig

    return FSDPActorConfig(strategy="fsdp", ppo_mini_batch_size=5, ppo_micro_batch_size_per_gpu=5, rollout_n=1,
                           use_kl_loss=False, entropy_coeff=0.0, loss_agg_mode="token-mean")


def _rows(seed: int = 0):
    """Per row: a leaf of full-sequence log-probs (with grad), teacher log-probs, old log-probs, advantages."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for p, r, _ in ROWS:
        full = (-(torch.rand(p + r, generator=g) * 3 + 0.1)).requires_grad_(True)
        student = full[p - 1: p - 1 + r].detach()
        out.append({"full": full, "teacher": student + torch.randn(r, generator=g),
                    "old": student + 0.05 * torch.randn(r, generator=g), "adv": torch.randn(r, generator=g)})
    return out


def _micro_batch(rows, idx, weights, *, dp_size, batch_num_tokens):
    from verl.utils import tensordict_utils as tu

    lens = [ROWS[i][0] + ROWS[i][1] for i in idx]
    log_probs = torch.nested.nested_tensor_from_jagged(
        torch.cat([rows[i]["full"] for i in idx]), offsets=torch.tensor([0] + torch.cumsum(torch.tensor(lens), 0)
                                                                        .tolist()))
    td = TensorDict({
        "prompts": nested([torch.arange(ROWS[i][0]) for i in idx]),
        "responses": nested([torch.arange(ROWS[i][1]) for i in idx]),
        "response_mask": nested([torch.ones(ROWS[i][1]) for i in idx]),
        "old_log_probs": nested([rows[i]["old"] for i in idx]),
        "advantages": nested([rows[i]["adv"] for i in idx]),
        TEACHER_LOGPROBS_KEY: nested([rows[i]["teacher"] for i in idx]),
        OPD_MASK_KEY: nested([weights[i] for i in idx]),
    }, batch_size=len(idx))
    tu.assign_non_tensor(td, dp_size=dp_size, batch_num_tokens=batch_num_tokens, global_batch_size=None)
    return td, {"log_probs": log_probs}


def _eq1(rows):
    """Independent Eq. 1 over every supervised token of the batch."""
    num, den = 0.0, 0.0
    for (p, r, ok), row in zip(ROWS, rows):
        if not ok:
            continue
        s = row["full"][p - 1: p - 1 + r]
        t = row["teacher"]
        num = num + (torch.sigmoid(BETA * (t - s.detach())) * (t - s)).sum()
        den += r
    return num / den


def _opd_grads(rows, splits, *, dp_size):
    """Sum over micro-batches (and ranks, averaged as DDP does) of the gradient of (total - ppo)."""
    from verl.workers.utils.losses import ppo_loss

    from skillduet_plugin.integrations.verl.loss import opd_token_weights

    weights = opd_token_weights([torch.ones(r) for _, r, _ in ROWS], [ok for *_, ok in ROWS])
    n_tokens = sum(r for _, r, _ in ROWS)
    opd_total = 0.0
    for idx in splits:
        td, out = _micro_batch(rows, idx, weights, dp_size=dp_size, batch_num_tokens=n_tokens)
        total, _ = skillduet_ppo_loss(actor_config(), out, td, **loss_settings(opd_coef=1.0, gate_beta=BETA))
        ppo, _ = ppo_loss(actor_config(), out, td)
        opd_total = opd_total + (total - ppo) / dp_size  # DDP averages the ranks' gradients
    return torch.autograd.grad(opd_total, [row["full"] for row in rows])


@pytest.mark.parametrize("splits,dp_size", [
    ([[0, 1, 2, 3, 4]], 1),            # one micro-batch
    ([[0, 1], [2, 3, 4]], 1),          # gradient accumulation: 18 vs 48 supervised tokens
    ([[0, 1, 4], [2, 3]], 2),          # two data-parallel ranks, one micro-batch each
    ([[0], [1], [2, 4], [3]], 2),      # two ranks x two micro-batches
])
def test_opd_gradient_is_eq1_over_the_whole_batch(splits, dp_size):
    rows = _rows()
    leaves = [row["full"] for row in rows]
    want = [torch.zeros_like(x) if g is None else g
            for x, g in zip(leaves, torch.autograd.grad(_eq1(rows), leaves, allow_unused=True))]
    got = _opd_grads(rows, splits, dp_size=dp_size)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    assert max(float(b.abs().max()) for b in want) > 1e-3


def test_negative_control_unit_weights_are_not_eq1():
    """The old mask (1 on supervised tokens) normalised by all response tokens: off by the supervised share."""
    from verl.workers.utils.losses import ppo_loss

    rows = _rows()
    ones = [torch.ones(r) * float(ok) for _, r, ok in ROWS]
    td, out = _micro_batch(rows, [0, 1, 2, 3, 4], ones, dp_size=1, batch_num_tokens=sum(r for _, r, _ in ROWS))
    total, _ = skillduet_ppo_loss(actor_config(), out, td, **loss_settings(opd_coef=1.0, gate_beta=BETA))
    opd = total - ppo_loss(actor_config(), out, td)[0]
    assert abs(opd.item() - _eq1(rows).item()) > 1e-3


def test_unsupervised_micro_batch_without_global_info_is_zero_not_nan():
    from verl.workers.utils.losses import ppo_loss

    rows = _rows()
    zeros = [torch.zeros(r) for _, r, _ in ROWS]
    td, out = _micro_batch(rows, [4], zeros, dp_size=1, batch_num_tokens=None)
    total, metrics = skillduet_ppo_loss(actor_config(), out, td, **loss_settings(opd_coef=1.0, gate_beta=BETA))
    assert torch.isfinite(total) and torch.equal(total, ppo_loss(actor_config(), out, td)[0])
    total.backward()
    assert torch.isfinite(rows[4]["full"].grad).all()


def _independent_stats(rows):
    """Gate statistics over every supervised token of the batch, by hand."""
    gaps = torch.cat([row["teacher"] - row["full"][p - 1: p - 1 + r].detach()
                      for (p, r, ok), row in zip(ROWS, rows) if ok])
    return {"opd/gate_mean": torch.sigmoid(BETA * gaps).mean().item(),
            "opd/gate_active_ratio": (gaps > 0).float().mean().item(),
            "opd/teacher_minus_student": gaps.mean().item(),
            "opd_token_ratio": sum(r for _, r, ok in ROWS if ok) / sum(r for _, r, _ in ROWS)}


def _logged(rows, splits, *, dp_size, global_info=True):
    """Each gate metric as verl's logger gets it: a SUM metric summed over a rank's micro-batches with the ranks'
    values averaged (the sum over all micro-batches over ``dp_size``), a MEAN metric the mean of the micro-batch
    values. ``global_info=False``: micro-batches without ``batch_num_tokens`` (each normalised by itself)."""
    from verl.utils.metric import AggregationType

    from skillduet_plugin.integrations.verl.loss import opd_token_weights

    weights = opd_token_weights([torch.ones(r) for _, r, _ in ROWS], [ok for *_, ok in ROWS])
    n_tokens = sum(r for _, r, _ in ROWS) if global_info else None
    parts: dict[str, list] = {}
    for idx in splits:
        td, out = _micro_batch(rows, idx, weights, dp_size=dp_size, batch_num_tokens=n_tokens)
        _, metrics = skillduet_ppo_loss(actor_config(), out, td, **loss_settings(opd_coef=1.0, gate_beta=BETA))
        for key in ("opd/gate_mean", "opd/gate_active_ratio", "opd/teacher_minus_student", "opd_token_ratio"):
            metric = metrics[f"skillduet/{key}"]
            parts.setdefault(key, []).append((float(metric.aggregate()), metric.aggregation))
    return {k: sum(v for v, _ in p) / (dp_size if p[0][1] == AggregationType.SUM else len(p)) for k, p in parts.items()}


@pytest.mark.parametrize("splits,dp_size", [
    ([[0, 1, 2, 3, 4]], 1),
    ([[0, 1], [2, 3, 4]], 1),
    ([[0, 2], [4, 1, 3]], 1),          # the same rows grouped otherwise (verl orders rows by random uids)
    ([[0, 1, 4], [2, 3]], 2),
    ([[0], [1], [2, 4], [3]], 2),
])
def test_gate_statistics_are_token_means_over_the_whole_batch(splits, dp_size):
    """The logged gate statistics and OPD token share are the batch's token means (checked by hand), so two runs
    that group the same rows into other micro-batches log the same numbers."""
    rows = _rows()
    want = _independent_stats(rows)
    assert _logged(rows, splits, dp_size=dp_size) == pytest.approx(want, rel=1e-5, abs=1e-7)
    assert 0.05 < want["opd/gate_active_ratio"] < 0.95 and abs(want["opd/teacher_minus_student"]) > 1e-3


def test_negative_control_means_of_micro_batch_means_depend_on_the_grouping():
    """Without global batch info each micro-batch logs its own means, averaged: 18 vs 48 supervised tokens in two
    micro-batches move that away from the batch's token mean, and another grouping of the same rows moves it
    again (what the resume test saw between two runs of the same work)."""
    rows = _rows()
    want = _independent_stats(rows)
    first = _logged(rows, [[0, 1], [2, 3, 4]], dp_size=1, global_info=False)
    second = _logged(rows, [[0, 2], [4, 1, 3]], dp_size=1, global_info=False)
    assert abs(first["opd/teacher_minus_student"] - want["opd/teacher_minus_student"]) > 1e-3
    assert abs(first["opd/teacher_minus_student"] - second["opd/teacher_minus_student"]) > 1e-3
