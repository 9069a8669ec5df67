"""Strength on TRL from forwards the step already pays for (``heldout="teacher"``): the bookkeeping between
TRL's generation, its loss forwards and the end of the step. The math is ``skills.teacher_scoring``.

At generation the main process plans each new candidate's rows and runs the budgeted extra forwards (rollout
weights); every process then keeps, per trajectory, the first loss-forward student log-probs (its base term:
TRL computes no old log-probs only when no optimizer step falls between a generation and its loss forwards, so
these are rollout-weight values) and the OPD teacher row; at the end of the step the rows are gathered to the
main process and the plans are scored without a forward.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch


class DeferredScores:
    """Plans waiting for their rows' loss-forward log-probs, and those rows by trajectory id."""

    def __init__(self) -> None:
        self.pending: list[tuple[list, list, Any, dict]] = []
        self.rows: dict[str, tuple[torch.Tensor | None, torch.Tensor]] = {}
        self.row_traj_ids: list[str] = []

    def add_plan(self, skills: Sequence[Any], trajectories: Sequence[Any], plan: Any, paid: dict) -> None:
        self.pending.append((list(skills), list(trajectories), plan, paid))

    def capture(self, rows: torch.Tensor, opd_mask: torch.Tensor, student: torch.Tensor,
                teacher: torch.Tensor) -> None:
        """Keep each batch row's first student row and its teacher row (None without a Local skill)."""
        has_teacher = opd_mask.sum(dim=1) > 0
        for j, row in enumerate(rows.tolist()):
            if row >= len(self.row_traj_ids) or self.row_traj_ids[row] in self.rows:
                continue
            t_row = teacher[j].detach().float().cpu() if bool(has_teacher[j]) else None
            self.rows[self.row_traj_ids[row]] = (t_row, student[j].detach().float().cpu())

    def finish(self, lifecycle: Any, gather: Callable[[list], list] | None = None) -> None:
        """Score every pending plan from the captured rows; ``gather`` collects all processes' rows."""
        rows, self.rows = self.rows, {}
        if gather is not None:
            merged: dict[str, Any] = {}
            for part in gather([rows]):
                merged.update(part)
            rows = merged
        pending, self.pending = self.pending, []
        for skills, trajs, plan, paid in pending:
            lengths = {t.traj_id: len(t.completion_ids or []) for t in trajs}
            teacher = {tid: r[0][:lengths[tid]] for tid, r in rows.items() if tid in lengths and r[0] is not None}
            base = {tid: r[1][:lengths[tid]] for tid, r in rows.items() if tid in lengths}
            base.update({t.traj_id: t.base_logps for t in trajs if t.base_logps is not None})  # TRL's old ones
            lifecycle.finish_scores(skills, trajs, plan, teacher, paid, base_logps=base)


__all__ = ["DeferredScores"]
