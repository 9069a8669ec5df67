"""The expected OPD term (``opd_estimator`` choices / topk) against plain Python, the sampled term and autograd."""

from __future__ import annotations

import math

import pytest
import torch

from skillduet_plugin.config import SkillDuetConfig
from skillduet_plugin.core.opd import expected_stats, opd_expected, opd_loss

#: the method's gate beta (the paper's)
BETA = SkillDuetConfig().gate_beta


def _logits(seed: int, shape=(4, 6)) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=gen, dtype=torch.float64) * 2,
            torch.randn(shape, generator=gen, dtype=torch.float64) * 2)


def reference(s: list[float], t: list[float], beta: float) -> float:
    """One position's term, float by float: sum_k p_s(k) g_k (t_k - s_k)."""
    total = 0.0
    for sk, tk in zip(s, t):
        g = 1.0 / (1.0 + math.exp(-beta * (tk - sk)))
        total += math.exp(sk) * g * (tk - sk)
    return total


def test_value_matches_plain_python():
    zs, zt = _logits(0)
    s, t = zs.log_softmax(-1), zt.log_softmax(-1)
    per_position, gate = opd_expected(s, t, beta=5.0)
    expected = [reference(srow, trow, 5.0) for srow, trow in zip(s.tolist(), t.tolist())]
    assert per_position.tolist() == pytest.approx(expected, rel=1e-6)
    assert gate.shape == s.shape and not gate.requires_grad


def test_gradient_is_the_expectation_of_the_sampled_terms_gradient():
    """Enumerate every draw y of the student: sum_y p_s(y) * grad of Eq. 1 on the one token y (the paper's sampled
    term, core.opd.opd_loss) equals the gradient of the expected term, with respect to the student's logits."""
    zs, zt = _logits(1, shape=(1, 5))
    t = zt.log_softmax(-1)
    z = zs.clone().requires_grad_(True)
    opd_expected(z.log_softmax(-1), t, beta=5.0)[0].sum().backward()
    expected = torch.zeros_like(zs)
    p = zs.softmax(-1)[0]
    for y in range(zs.shape[1]):
        zy = zs.clone().requires_grad_(True)
        s_all = zy.log_softmax(-1)
        mask = torch.zeros(1, 1, dtype=torch.float64)
        mask[0, 0] = 1.0
        loss, _ = opd_loss(s_all[:, y:y + 1], t[:, y:y + 1], mask, beta=5.0)
        loss.backward()
        expected += p[y] * zy.grad
    torch.testing.assert_close(z.grad, expected, rtol=1e-5, atol=1e-8)


def test_gradient_wrt_student_logps_is_minus_prob_times_gate():
    zs, zt = _logits(2)
    s = zs.log_softmax(-1).clone().requires_grad_(True)
    t = zt.log_softmax(-1).clone().requires_grad_(True)
    per_position, _ = opd_expected(s, t, beta=3.0)
    per_position.sum().backward()
    gate = torch.sigmoid(3.0 * (t.detach() - s.detach()))
    torch.testing.assert_close(s.grad, (-s.detach().exp() * gate).to(s.grad.dtype), rtol=1e-5, atol=1e-8)
    assert t.grad is None  # no gradient ever reaches the teacher


def test_detached_weights_matter_negative_control():
    """Without the stop-gradients (weight and gate differentiated) the gradient differs: the test above can fail."""
    zs, zt = _logits(3)
    s = zs.log_softmax(-1).clone().requires_grad_(True)
    t = zt.log_softmax(-1)
    opd_expected(s, t, beta=BETA)[0].sum().backward()
    s2 = zs.log_softmax(-1).clone().requires_grad_(True)
    g = torch.sigmoid(5.0 * (t - s2))
    (s2.exp() * g * (t - s2)).sum().backward()
    assert not torch.allclose(s.grad, s2.grad)


def test_student_equal_to_teacher_is_a_stationary_point():
    """At p_s = p_t every gate is 0.5, and sum_k 0.5 grad p_s(k) = 0: nothing moves (Eq. 1's fixed point)."""
    zs, _ = _logits(4)
    z = zs.clone().requires_grad_(True)
    opd_expected(z.log_softmax(-1), zs.log_softmax(-1), beta=BETA)[0].sum().backward()
    assert z.grad.abs().max().item() < 1e-6  # float32 arithmetic
    moved = zs.clone().requires_grad_(True)
    opd_expected(moved.log_softmax(-1), zs.roll(1, dims=-1).log_softmax(-1), beta=BETA)[0].sum().backward()
    assert moved.grad.abs().max().item() > 1e-2  # another teacher: a real gradient


def test_moves_probability_towards_the_teachers_choice():
    """One gradient step on the student's logits raises the probability of the teacher's preferred alternative."""
    z = torch.zeros(1, 4, requires_grad=True)
    teacher = torch.tensor([[0.05, 0.85, 0.05, 0.05]]).log()
    opd_expected(z.log_softmax(-1), teacher, beta=BETA)[0].sum().backward()
    after = (z.detach() - 1.0 * z.grad).softmax(-1)
    assert after[0, 1] > 0.25 and after[0, 1] == after.max()


def test_padding_with_minus_inf_is_ignored():
    zs, zt = _logits(5, shape=(2, 4))
    s, t = zs.log_softmax(-1), zt.log_softmax(-1)
    valid = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    s_pad = torch.where(valid.bool(), s, torch.full_like(s, float("-inf"))).requires_grad_(True)
    t_pad = torch.where(valid.bool(), t, torch.full_like(t, float("-inf")))
    per_position, gate = opd_expected(s_pad, t_pad, valid=valid, beta=BETA)
    per_position.sum().backward()
    expected = [reference(s[0, :3].tolist(), t[0, :3].tolist(), 5.0),
                reference(s[1, :2].tolist(), t[1, :2].tolist(), 5.0)]
    assert per_position.tolist() == pytest.approx(expected, rel=1e-6)
    assert torch.isfinite(s_pad.grad).all() and (s_pad.grad[~valid.bool()] == 0).all()
    assert (gate[~valid.bool()] == 0).all()


def test_shape_errors():
    with pytest.raises(ValueError, match="same"):
        opd_expected(torch.zeros(2, 3), torch.zeros(2, 4), beta=BETA)
    with pytest.raises(ValueError, match="valid"):
        opd_expected(torch.zeros(2, 3), torch.zeros(2, 3), valid=torch.ones(2, 2), beta=BETA)


def test_stats_by_hand():
    s = torch.tensor([[0.4, 0.6], [0.9, 0.1]]).log()
    t = torch.tensor([[0.8, 0.2], [0.9, 0.1]]).log()
    stats = expected_stats(s, t, torch.tensor([1.0, 1.0]), beta=5.0)

    def g(a: float, b: float) -> float:
        return 1 / (1 + math.exp(-5 * (math.log(a) - math.log(b))))

    gate_row0 = 0.4 * g(0.8, 0.4) + 0.6 * g(0.2, 0.6)
    assert stats["opd/gate_mean"] == pytest.approx((gate_row0 + 0.5) / 2, rel=1e-5)
    assert stats["opd/gate_active_ratio"] == pytest.approx(0.4 / 2, rel=1e-5)  # row 0: only the 0.8 alternative
    gap0 = 0.4 * math.log(0.8 / 0.4) + 0.6 * math.log(0.2 / 0.6)  # -KL(p_s || p_t)
    assert stats["opd/teacher_minus_student"] == pytest.approx(gap0 / 2, rel=1e-5)
    assert stats["opd/deciding_share"] == pytest.approx(0.5)  # row 0: the teacher's first choice is another
    assert stats["opd/student_prob_teacher_top"] == pytest.approx((0.4 + 0.9) / 2, rel=1e-5)
    assert stats["opd/teacher_prob_teacher_top"] == pytest.approx((0.8 + 0.9) / 2, rel=1e-5)
    masked = expected_stats(s, t, torch.tensor([0.0, 1.0]), beta=5.0)
    assert masked["opd/deciding_share"] == 0.0 and masked["opd/student_prob_teacher_top"] == pytest.approx(0.9)


def test_expected_stats_logs_the_documented_metric_names_each_with_its_own_value():
    """The names are an interface (dashboards, the report and the study read them), so they are pinned here as
    literals, not read back from EXPECTED_STATS; each name carries its own statistic (a swapped order or a value
    list one short would pass a check of the keys alone)."""
    s = torch.log(torch.tensor([[0.7, 0.2, 0.1]]))
    t = torch.log(torch.tensor([[0.1, 0.6, 0.3]]))
    stats = expected_stats(s, t, torch.ones(1), 5.0)
    assert list(stats) == ["opd/gate_mean", "opd/gate_active_ratio", "opd/teacher_minus_student",
                           "opd/deciding_share", "opd/student_prob_teacher_top", "opd/teacher_prob_teacher_top"]
    gate = [1 / (1 + math.exp(-5.0 * (math.log(b) - math.log(a)))) for a, b in ((0.7, 0.1), (0.2, 0.6), (0.1, 0.3))]
    by_hand = {"opd/gate_mean": 0.7 * gate[0] + 0.2 * gate[1] + 0.1 * gate[2],
               "opd/gate_active_ratio": 0.2 + 0.1,  # the gate is above 1/2 where the teacher is above the student
               "opd/teacher_minus_student": sum(a * (math.log(b) - math.log(a))
                                                for a, b in ((0.7, 0.1), (0.2, 0.6), (0.1, 0.3))),
               "opd/deciding_share": 1.0, "opd/student_prob_teacher_top": 0.2, "opd/teacher_prob_teacher_top": 0.6}
    assert stats == pytest.approx(by_hand, rel=1e-5)
    # negative control: the same values under a swapped pair of names no longer match
    swapped = dict(by_hand, **{"opd/student_prob_teacher_top": 0.6, "opd/teacher_prob_teacher_top": 0.2})
    assert stats != pytest.approx(swapped, rel=1e-5)
