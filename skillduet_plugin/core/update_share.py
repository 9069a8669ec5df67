"""How much of an optimizer step's update the OPD term makes: the norms of the policy term's and the OPD term's
gradients, summed over the step's micro-batches (logged as ``opd/update_*``)."""

from __future__ import annotations

from typing import Any

import torch


def _term_grads(params: list, term: torch.Tensor) -> list:
    grads = torch.autograd.grad(term, params, retain_graph=True, allow_unused=True)
    return [None if g is None else g.detach().float() for g in grads]


def _norm(grads: list) -> float:
    return float(torch.sqrt(sum((g ** 2).sum() for g in grads if g is not None)))


def _share(policy_norm: float, opd_norm: float) -> dict[str, float]:
    total = policy_norm + opd_norm
    return {"opd/update_norm_policy": policy_norm, "opd/update_norm_opd": opd_norm,
            "opd/update_share": opd_norm / total if total > 0 else 0.0}


class GradShare:
    """How much of an optimizer step's update OPD contributes: the norms of the policy term's and the OPD term's
    gradients (two extra backward passes through the retained graph; a measurement, the training step is
    unchanged). The batch may arrive in accumulated micro-batches: each term's
    gradient is summed over the micro-batches (the update is their sum), and the norms are taken of the sums at the
    last one. A mean of per-micro-batch shares would be another number: two slices whose OPD gradients point in
    opposite directions add to less than their norms do. Holds two float32 copies of the trainable parameters'
    gradients between the micro-batches of a step (only while ``opd_update_share`` is on)."""

    def __init__(self) -> None:
        self._sums: list[list] | None = None

    def add(self, model: Any, policy_term: torch.Tensor, opd_term: torch.Tensor, last: bool) -> dict[str, float]:
        """Add one micro-batch's two terms; returns the step's norms and share when ``last``, else ``{}``."""
        params = [p for p in model.parameters() if p.requires_grad]
        grads = [_term_grads(params, term) for term in (policy_term, opd_term)]
        if self._sums is None:
            self._sums = grads
        else:
            self._sums = [[a if b is None else (b if a is None else a + b) for a, b in zip(old, new)]
                          for old, new in zip(self._sums, grads)]
        if not last:
            return {}
        sums, self._sums = self._sums, None
        return _share(*(_norm(g) for g in sums))


__all__ = ["GradShare"]
