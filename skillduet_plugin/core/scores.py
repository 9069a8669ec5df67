"""Response-based skill scores (the paper's Eq. 2 and 3) and top-k selection.

For a candidate skill L and a held-out trajectory r, the response shift is
``Delta_r(L) = mean over r's valid response tokens of [log p(y | context + L) - log p(y | context)]``.

- Strength  ``S(L) = mean_r |Delta_r(L)|``                       (the default selector)
- Utility   ``U(L) = mean_r A_r * Delta_r(L)``                   (A_r: trajectory-mean advantage)
- Contrast  ``C(L) = mean_{r in H+} Delta_r - mean_{r in H-} Delta_r``
"""

from __future__ import annotations

import math
import random
from typing import Sequence

import torch


def response_shift(skill_logps: torch.Tensor, base_logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean per-token log-prob shift of each trajectory, ``(batch,)`` float32.

    Args:
        skill_logps: ``(batch, response_len)`` log p(y_i | context + L, y_<i).
        base_logps: ``(batch, response_len)`` log p(y_i | context, y_<i) (the trainer's old log-probs).
        mask: ``(batch, response_len)`` 1 on valid policy tokens.

    A row without valid tokens has no defined shift and is returned as NaN; the score functions skip NaNs.
    """
    if not (skill_logps.shape == base_logps.shape == mask.shape):
        raise ValueError(f"shapes differ: skill {tuple(skill_logps.shape)}, base {tuple(base_logps.shape)}, "
                         f"mask {tuple(mask.shape)}")
    m = mask.float()
    n = m.sum(dim=-1)
    diff = (skill_logps.float() - base_logps.float()) * m
    shift = diff.sum(dim=-1) / n.clamp_min(1.0)
    return torch.where(n > 0, shift, torch.full_like(shift, float("nan")))


def _valid(values: Sequence[float]) -> list[float]:
    return [float(v) for v in values if v is not None and not math.isnan(float(v))]


def strength(shifts: Sequence[float] | torch.Tensor) -> float | None:
    """S(L) = mean |Delta_r|; None when no held-out trajectory has a defined shift."""
    vals = _valid(_as_list(shifts))
    if not vals:
        return None
    return sum(abs(v) for v in vals) / len(vals)


def utility(shifts: Sequence[float] | torch.Tensor,
            advantages: Sequence[float] | torch.Tensor) -> float | None:
    """U(L) = mean A_r * Delta_r over trajectories with a defined shift; None if there are none."""
    s, a = _as_list(shifts), _as_list(advantages)
    if len(s) != len(a):
        raise ValueError(f"utility needs one advantage per shift, got {len(s)} shifts and {len(a)} advantages")
    pairs = [(float(x), float(y)) for x, y in zip(s, a) if x is not None and not math.isnan(float(x))]
    if not pairs:
        return None
    return sum(x * y for x, y in pairs) / len(pairs)


def contrast(shifts: Sequence[float] | torch.Tensor, success: Sequence[bool]) -> float | None:
    """C(L) = mean shift on successes - mean shift on failures.

    Undefined unless the held-out set has at least one success and one failure with a defined shift:
    then None is returned (callers record "contrast undefined"), never a silent 0.
    """
    s = _as_list(shifts)
    if len(s) != len(success):
        raise ValueError(f"contrast needs one success flag per shift, got {len(s)} and {len(success)}")
    pos = _valid([x for x, ok in zip(s, success) if ok])
    neg = _valid([x for x, ok in zip(s, success) if not ok])
    if not pos or not neg:
        return None
    return sum(pos) / len(pos) - sum(neg) / len(neg)


def select_top(candidate_ids: Sequence[str], scores: Sequence[float | None], keep_ratio: float,
               rng: random.Random | None = None, shuffle: bool = False) -> tuple[list[str], list[str]]:
    """Keep the top ``keep_ratio`` share of candidates.

    Returns ``(kept, rejected)`` in rank order. At least one candidate is kept when any exists
    (``ceil(keep_ratio * n)``). Candidates whose score is None rank below every scored one. Ties break by
    candidate id, so the result does not depend on input order. ``shuffle=True`` (the Random selector) ignores the
    scores and shuffles with ``rng`` (required, so the ablation is reproducible from the seed).
    """
    if len(candidate_ids) != len(scores):
        raise ValueError(f"{len(candidate_ids)} candidate ids but {len(scores)} scores")
    if not 0 < keep_ratio <= 1:
        raise ValueError(f"keep_ratio={keep_ratio!r} must be in (0, 1]")
    n = len(candidate_ids)
    if n == 0:
        return [], []
    k = max(1, math.ceil(keep_ratio * n - 1e-9))
    if shuffle:
        if rng is None:
            raise ValueError("select_top(shuffle=True) needs an rng seeded from the config seed")
        order = sorted(candidate_ids)
        rng.shuffle(order)
    else:
        def key(item: tuple[str, float | None]) -> tuple[int, float, str]:
            cid, score = item
            if score is None or math.isnan(float(score)):
                return (1, 0.0, cid)
            return (0, -float(score), cid)

        order = [cid for cid, _ in sorted(zip(candidate_ids, scores), key=key)]
    return order[:k], order[k:]


def _as_list(values: Sequence[float] | torch.Tensor) -> list:
    if isinstance(values, torch.Tensor):
        return values.detach().float().flatten().tolist()
    return list(values)
