"""Gated on-policy distillation (OPD), the paper's Eq. 1, as pure tensor functions.

The teacher is the same model with a Local skill in its prompt; ``t_i`` and ``s_i`` are the teacher's and the
student's log-probabilities of the sampled token ``i``. Per token::

    g_i = sg[sigmoid(beta * (t_i - s_i))]
    L   = sum_i M_i g_i (sg[t_i] - s_i) / sum_i M_i

so dL/ds_i = -g_i M_i / sum(M): gated imitation of the sampled tokens, strongest where the skill-conditioned
teacher prefers the token more than the student does. Both the gate and the teacher are detached.

The sampled token ``y ~ p_s`` is one draw. Over the student's draw the expected gradient of the term is
``E_y[-g_y grad s_y] = -sum_k g_k grad p_s(k)``, which :func:`opd_expected` computes exactly over a set of
alternatives (every admissible action of a choose-mode turn, or the teacher's top-k tokens of a position):
``sum_k sg[p_s(k)] g_k (sg[t_k] - s_k)`` has that gradient. It keeps Eq. 1's gate and stop-gradients and moves
probability towards the alternatives the teacher prefers more than the student, without the variance of one draw
(the teacher enters the sampled term only through the gate of the token that happened to be drawn).
"""

from __future__ import annotations

import torch

from skillduet_plugin.core.names import OPD_AGGREGATIONS
from skillduet_plugin.core.settings import check


def opd_per_token(student_logps: torch.Tensor, teacher_logps: torch.Tensor,
                  beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token OPD terms and gates, in float32.

    Args:
        student_logps: ``(batch, response_len)`` log-probs of the sampled tokens under the student (with grad).
        teacher_logps: ``(batch, response_len)`` log-probs of the same tokens under the teacher (detached here).
        beta: gate sharpness.

    Returns:
        ``(per_token_loss, gate)``, both ``(batch, response_len)`` float32; ``gate`` carries no gradient.
    """
    if student_logps.shape != teacher_logps.shape:
        raise ValueError(f"student_logps {tuple(student_logps.shape)} and teacher_logps "
                         f"{tuple(teacher_logps.shape)} must have the same (batch, response_len) shape")
    s = student_logps.float()
    t = teacher_logps.detach().float()
    gate = torch.sigmoid(beta * (t - s.detach()))
    return gate * (t - s), gate


def opd_expected(student_logps: torch.Tensor, teacher_logps: torch.Tensor, beta: float,
                 valid: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 1's per-position term in expectation over the student's choice among ``K`` alternatives, in float32.

    Args:
        student_logps: ``(..., K)`` the student's log-probs of the alternatives (with grad): normalised over a
            choose-mode turn's admissible actions, or next-token log-probs at the teacher's top-k ids.
        teacher_logps: ``(..., K)`` the teacher's log-probs of the same alternatives (detached here).
        beta: gate sharpness.
        valid: ``(..., K)`` 1 for real alternatives, 0 for padding (default: all real).

    Returns:
        ``(per_position, gate)``: ``per_position[...] = sum_k valid_k sg[exp(s_k)] g_k (sg[t_k] - s_k)`` with
        ``g_k = sg[sigmoid(beta (t_k - s_k))]``, shape ``(...)``, aggregated like :func:`opd_per_token`'s output
        (:func:`aggregate`); ``gate`` ``(..., K)`` carries no gradient. The gradient with respect to the student's
        log-probs is ``-valid_k p_s(k) g_k``: the expected gradient of the sampled term when ``s`` is normalised over
        the ``K`` alternatives.
    """
    if student_logps.shape != teacher_logps.shape:
        raise ValueError(f"student_logps {tuple(student_logps.shape)} and teacher_logps "
                         f"{tuple(teacher_logps.shape)} must have the same (..., K) shape")
    if valid is not None and valid.shape != student_logps.shape:
        raise ValueError(f"valid {tuple(valid.shape)} must match student_logps {tuple(student_logps.shape)}")
    s = student_logps.float()
    t = teacher_logps.detach().float()
    v = torch.ones_like(s) if valid is None else valid.to(s.dtype)
    # padding may hold -inf or garbage: replace it before any arithmetic, so it cannot reach the sum as NaN
    s = torch.where(v > 0, s, torch.zeros_like(s))
    t = torch.where(v > 0, t, torch.zeros_like(t))
    gate = torch.sigmoid(beta * (t - s.detach())) * v
    weight = s.detach().exp() * gate
    return (weight * (t - s)).sum(dim=-1), gate


#: The keys of :func:`expected_stats`, in its order.
EXPECTED_STATS = ("opd/gate_mean", "opd/gate_active_ratio", "opd/teacher_minus_student", "opd/deciding_share",
                  "opd/student_prob_teacher_top", "opd/teacher_prob_teacher_top")
#: The gate statistics of :func:`opd_loss` that are token means over the supervised tokens (``opd/loss`` is the
#: aggregated loss itself, a token mean only under ``token-mean``).
GATE_STATS = ("opd/gate_mean", "opd/gate_active_ratio", "opd/teacher_minus_student")


def expected_stats(student_logps: torch.Tensor, teacher_logps: torch.Tensor, mask: torch.Tensor, beta: float,
                   valid: torch.Tensor | None = None) -> dict[str, float]:
    """The gate statistics of :func:`opd_expected` (each an expectation under the student, averaged over the
    positions in ``mask``) and how the two models rank the alternatives: ``opd/deciding_share`` (positions where the
    teacher's first choice is not the student's), ``opd/student_prob_teacher_top`` and ``opd/teacher_prob_teacher_top``
    (each model's probability of the teacher's first choice)."""
    with torch.no_grad():
        s, t = student_logps.detach().float(), teacher_logps.detach().float()
        v = torch.ones_like(s, dtype=torch.bool) if valid is None else valid.bool()
        s = torch.where(v, s, torch.full_like(s, -1e30))
        t = torch.where(v, t, torch.full_like(t, -1e30))
        p = s.exp() * v
        gate = torch.sigmoid(beta * (t - s)) * v
        gap = torch.where(v, t - s, torch.zeros_like(s))
        top = t.argmax(dim=-1, keepdim=True)
        m = mask.float()
        n = m.sum().clamp_min(1.0)
        rows = (  # in the order of EXPECTED_STATS
            (p * gate).sum(-1),
            (p * (gate > 0.5)).sum(-1),
            (p * gap).sum(-1),
            (s.argmax(dim=-1, keepdim=True) != top).float().squeeze(-1),
            s.gather(-1, top).exp().squeeze(-1),
            t.gather(-1, top).exp().squeeze(-1),
        )
        values = torch.stack([(x * m).sum() / n for x in rows]).tolist()
    return dict(zip(EXPECTED_STATS, values))


def opd_numerator(per_token: torch.Tensor, mask: torch.Tensor, agg: str = "token-mean") -> torch.Tensor:
    """The sum that :func:`aggregate` divides: ``sum(M*x)`` for ``token-mean``, else the sum of per-sequence
    values (token mean or token sum) over sequences. Split batches add these up before one division."""
    check("agg", agg, choices=OPD_AGGREGATIONS)
    m = mask.to(per_token.dtype)
    if agg == "token-mean":
        return (per_token * m).sum()
    seq_tokens = m.sum(dim=-1)
    seq_sum = (per_token * m).sum(dim=-1)
    per_seq = seq_sum / seq_tokens.clamp_min(1.0) if agg == "seq-mean-token-mean" else seq_sum
    return (per_seq * (seq_tokens > 0).to(per_token.dtype)).sum()


def opd_denominator(mask: torch.Tensor, agg: str = "token-mean") -> torch.Tensor:
    """What :func:`aggregate` divides by: supervised tokens (``token-mean``) or sequences with at least one
    supervised token (the ``seq-mean-*`` modes), as a float32 scalar. Summed over micro-batches and ranks it
    gives the one denominator of Eq. 1 over a whole batch."""
    check("agg", agg, choices=OPD_AGGREGATIONS)
    m = mask.float()
    return m.sum() if agg == "token-mean" else (m.sum(dim=-1) > 0).float().sum()


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, agg: str = "token-mean") -> torch.Tensor:
    """Aggregate a ``(batch, response_len)`` loss matrix over the valid tokens in ``mask``.

    ``token-mean`` = sum(M*x)/sum(M); ``seq-mean-token-mean`` averages each sequence's token mean over
    sequences with at least one valid token; ``seq-mean-token-sum`` averages each sequence's token sum.
    An empty mask gives 0 (with a graph, so ``backward`` still works), never NaN.
    """
    return opd_numerator(per_token, mask, agg) / opd_denominator(mask, agg).to(per_token.dtype).clamp_min(1.0)


def opd_loss(student_logps: torch.Tensor, teacher_logps: torch.Tensor, mask: torch.Tensor,
             beta: float, agg: str = "token-mean") -> tuple[torch.Tensor, dict[str, float]]:
    """The OPD loss of Eq. 1 and its gate statistics.

    Args:
        student_logps: ``(batch, response_len)``, differentiable.
        teacher_logps: ``(batch, response_len)``; no gradient ever reaches it.
        mask: ``(batch, response_len)`` 1 for supervised policy tokens (never environment tokens, never
            trajectories without a Local skill), 0 elsewhere.
        beta: gate sharpness (paper: 5).
        agg: aggregation mode, see :func:`aggregate`.

    Returns:
        ``(loss, metrics)``: a float32 scalar and ``opd/loss``, ``opd/gate_mean``, ``opd/gate_active_ratio``
        (share of valid tokens with g > 0.5, i.e. teacher above student) and ``opd/teacher_minus_student``.
    """
    if mask.shape != student_logps.shape:
        raise ValueError(f"mask {tuple(mask.shape)} must match student_logps {tuple(student_logps.shape)}")
    per_token, gate = opd_per_token(student_logps, teacher_logps, beta)
    loss = aggregate(per_token, mask, agg)
    with torch.no_grad():
        m = mask.float()
        n = m.sum().clamp_min(1.0)
        gap = teacher_logps.detach().float() - student_logps.detach().float()
        stats = torch.stack([
            loss.detach(),
            (gate * m).sum() / n,
            ((gate > 0.5).float() * m).sum() / n,
            (gap * m).sum() / n,
        ]).tolist()
    return loss, {"opd/loss": stats[0], **dict(zip(GATE_STATS, stats[1:]))}
