"""Gated on-policy distillation (OPD), the paper's Eq. 1, as pure tensor functions.

The teacher is the same model with a Local skill in its prompt; ``t_i`` and ``s_i`` are the teacher's and the
student's log-probabilities of the sampled token ``i``. Per token::

    g_i = sg[sigmoid(beta * (t_i - s_i))]
    L   = sum_i M_i g_i (sg[t_i] - s_i) / sum_i M_i

so dL/ds_i = -g_i M_i / sum(M): gated imitation of the sampled tokens, strongest where the skill-conditioned
teacher prefers the token more than the student does. Both the gate and the teacher are detached.
"""

from __future__ import annotations

import torch

from skillduet_plugin.core.names import OPD_AGGREGATIONS
from skillduet_plugin.core.settings import check


def opd_per_token(student_logps: torch.Tensor, teacher_logps: torch.Tensor,
                  beta: float = 5.0) -> tuple[torch.Tensor, torch.Tensor]:
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
             beta: float = 5.0, agg: str = "token-mean") -> tuple[torch.Tensor, dict[str, float]]:
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
    metrics = {
        "opd/loss": stats[0],
        "opd/gate_mean": stats[1],
        "opd/gate_active_ratio": stats[2],
        "opd/teacher_minus_student": stats[3],
    }
    return loss, metrics
