"""The OPD loss (Eq. 1) against an independent reference, autograd, masks and dtypes."""

from __future__ import annotations

import math

import pytest
import torch

from skillduet_plugin.config import SkillDuetConfig
from skillduet_plugin.core.opd import aggregate, opd_loss, opd_per_token

#: the method's gate beta (the paper's)
BETA = SkillDuetConfig().gate_beta


def reference_opd(s: list[list[float]], t: list[list[float]], m: list[list[int]], beta: float) -> float:
    """Eq. 1 written with plain Python floats, token by token."""
    num, den = 0.0, 0.0
    for srow, trow, mrow in zip(s, t, m):
        for si, ti, mi in zip(srow, trow, mrow):
            g = 1.0 / (1.0 + math.exp(-beta * (ti - si)))
            num += mi * g * (ti - si)
            den += mi
    return num / den if den else 0.0


def _batch(seed: int = 0, shape=(3, 7)):
    gen = torch.Generator().manual_seed(seed)
    s = -torch.rand(shape, generator=gen, dtype=torch.float64) * 4
    t = -torch.rand(shape, generator=gen, dtype=torch.float64) * 4
    m = (torch.rand(shape, generator=gen) > 0.3).to(torch.float64)
    m[0, 0] = 1.0
    return s, t, m


def test_loss_matches_plain_python_reference():
    s, t, m = _batch()
    loss, metrics = opd_loss(s, t, m, beta=5.0)
    expected = reference_opd(s.tolist(), t.tolist(), m.tolist(), 5.0)
    assert loss.item() == pytest.approx(expected, rel=1e-6, abs=1e-7)
    assert metrics["opd/loss"] == pytest.approx(expected, rel=1e-6, abs=1e-7)


def test_gradient_wrt_student_is_minus_gate_times_mask_over_count():
    s, t, m = _batch(seed=1)
    s = s.clone().requires_grad_(True)
    t = t.clone().requires_grad_(True)
    loss, _ = opd_loss(s, t, m, beta=5.0)
    loss.backward()
    gate = torch.sigmoid(5.0 * (t.detach() - s.detach())).float()
    expected = (-gate * m.float() / m.sum()).to(s.grad.dtype)
    torch.testing.assert_close(s.grad, expected, rtol=1e-5, atol=1e-7)
    # no gradient ever reaches the teacher
    assert t.grad is None


def test_gate_is_detached_autograd_differs_from_undetached_version():
    s, t, m = _batch(seed=2)
    s1 = s.clone().requires_grad_(True)
    opd_loss(s1, t, m, beta=BETA)[0].backward()
    s2 = s.clone().requires_grad_(True)
    g = torch.sigmoid(5.0 * (t - s2))  # gate NOT detached: a different objective
    ((g * (t - s2) * m).sum() / m.sum()).backward()
    assert not torch.allclose(s1.grad, s2.grad)


def test_masked_tokens_have_no_effect():
    s, t, m = _batch(seed=3)
    loss_a, _ = opd_loss(s, t, m, beta=BETA)
    s2, t2 = s.clone(), t.clone()
    s2[m == 0] = -123.0
    t2[m == 0] = 45.0
    loss_b, _ = opd_loss(s2, t2, m, beta=BETA)
    assert loss_a.item() == pytest.approx(loss_b.item(), rel=1e-9, abs=1e-12)
    s3 = s2.clone().requires_grad_(True)
    opd_loss(s3, t2, m, beta=BETA)[0].backward()
    assert torch.all(s3.grad[m == 0] == 0)


def test_empty_mask_gives_zero_not_nan_and_backward_works():
    s = torch.zeros(2, 4, requires_grad=True)
    t = torch.ones(2, 4)
    m = torch.zeros(2, 4)
    for agg in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"):
        loss, metrics = opd_loss(s, t, m, agg=agg, beta=BETA)
        assert loss.item() == 0.0
        assert not any(math.isnan(v) for v in metrics.values())
        loss.backward()
        assert torch.all(s.grad == 0)


def test_bf16_input_gives_float32_result():
    s, t, m = _batch(seed=4)
    s16, t16 = s.to(torch.bfloat16), t.to(torch.bfloat16)
    loss16, _ = opd_loss(s16, t16, m, beta=BETA)
    loss32, _ = opd_loss(s16.float(), t16.float(), m.float(), beta=BETA)
    assert loss16.dtype == torch.float32
    assert loss16.item() == pytest.approx(loss32.item(), rel=1e-6)


def test_metrics_match_hand_computation():
    s = torch.tensor([[-1.0, -2.0, -3.0]])
    t = torch.tensor([[-0.5, -2.5, -3.0]])
    m = torch.tensor([[1.0, 1.0, 0.0]])
    _, metrics = opd_loss(s, t, m, beta=5.0)
    g1, g2 = 1 / (1 + math.exp(-2.5)), 1 / (1 + math.exp(2.5))
    assert metrics["opd/gate_mean"] == pytest.approx((g1 + g2) / 2, rel=1e-6)
    assert metrics["opd/gate_active_ratio"] == pytest.approx(0.5)
    assert metrics["opd/teacher_minus_student"] == pytest.approx(0.0, abs=1e-7)
    assert metrics["opd/loss"] == pytest.approx((g1 * 0.5 + g2 * -0.5) / 2, rel=1e-6)


def test_sequence_aggregations_by_hand():
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0], [9.0, 9.0, 9.0]])
    m = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    assert aggregate(x, m, "token-mean").item() == pytest.approx(10 / 4)
    assert aggregate(x, m, "seq-mean-token-mean").item() == pytest.approx((2.0 + 4.0) / 2)
    assert aggregate(x, m, "seq-mean-token-sum").item() == pytest.approx((6.0 + 4.0) / 2)
    with pytest.raises(ValueError, match="agg='sum'"):
        aggregate(x, m, "sum")


def test_beta_zero_is_constant_half_gate():
    s, t, m = _batch(seed=5)
    per_token, gate = opd_per_token(s, t, beta=0.0)
    assert torch.all(gate == 0.5)
    torch.testing.assert_close(per_token, 0.5 * (t - s).float())


def test_shape_mismatch_raises_with_shapes():
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(2, 4\)"):
        opd_loss(torch.zeros(2, 3), torch.zeros(2, 4), torch.ones(2, 3), beta=BETA)
