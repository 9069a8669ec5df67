"""Response-based scoring of Local candidates on held-out trajectories: every score the selector registry
(``core.selectors``) declares, Strength, Utility and Contrast among them.

This module holds the pairwise estimator (``heldout`` = same_scope / same_scope_other_tasks / any); the default
estimator that reads the teacher pass (``heldout="teacher"``) is ``skills.teacher_scoring``. For a candidate L,
``H_L`` holds trajectories that did not produce L (policy ``config.heldout``), capped at ``config.max_heldout``
by a deterministic per-skill order. For each r in H_L the skill-conditioned log-probs of
r's completion come from ONE batched ``logprob_fn`` call over every (L, r) pair of the round; the base
log-probs are r's own old log-probs (``Trajectory.base_logps``) when present, otherwise they join the same call
with r's student context. Needs no new environment interaction.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from skillduet_plugin.core.logprobs import LogprobFn, pad_logprobs
from skillduet_plugin.core.scores import response_shift
from skillduet_plugin.core.selectors import compute_scores
from skillduet_plugin.skills.types import Skill, Trajectory

ContextFn = Callable[[Trajectory, Skill | None], list[int]]
PAIRWISE_POLICIES = ("same_scope", "same_scope_other_tasks", "any")


@dataclass
class SkillScore:
    """Scores of one candidate, one per registered selector score (``core.selectors.score_names``), each also
    read as an attribute (``score.strength``, ``score.mine``); ``note`` says why a score is None
    (machine-readable, ``;``-separated)."""

    skill_id: str
    values: dict[str, float | None]
    n_heldout: int
    shifts: dict[str, float]
    note: str = ""

    def __getattr__(self, name: str) -> float | None:
        # only called for names that are not fields: a registered score, or the usual AttributeError
        values = self.__dict__.get("values") or {}
        if name in values:
            return values[name]
        raise AttributeError(f"{type(self).__name__} has no score {name!r}: scores are {', '.join(values)}")

    def as_record(self) -> dict[str, float | int | str | None]:
        return {**self.values, "n_heldout": self.n_heldout, "note": self.note or None}


def _scorable(t: Trajectory) -> bool:
    return (t.split == "train" and bool(t.completion_ids) and t.completion_mask is not None
            and any(t.completion_mask))


def _order_key(skill_id: str, traj: Trajectory) -> tuple[str, str]:
    # A per-skill pseudo-random but reproducible order, so capped held-out sets differ across skills; it hashes
    # Trajectory.order_key, which holds no per-run random part (verl's prompt uids), so a resumed run picks the same.
    order_id, traj_id = traj.order_key
    return hashlib.sha256(f"{skill_id}|{order_id}".encode()).hexdigest(), traj_id


def heldout_set(skill: Skill, trajectories: Sequence[Trajectory], policy: str, max_heldout: int) -> list[Trajectory]:
    """H_L: scorable trajectories that did not produce ``skill`` under ``policy``, at most ``max_heldout``.

    ``same_scope``: same scope, not a source; ``same_scope_other_tasks``: also not the source task;
    ``any``: every non-source trajectory. Validation trajectories never score (they carry no training signal).
    """
    sources = set(skill.source_traj_ids)
    by_id = {t.traj_id: t for t in trajectories}
    source_tasks = {by_id[s].task_id for s in sources if s in by_id}
    if skill.metadata.get("task_id") is not None:
        source_tasks.add(str(skill.metadata["task_id"]))
    pool = []
    for t in trajectories:
        if t.traj_id in sources or not _scorable(t):
            continue
        if policy in ("same_scope", "same_scope_other_tasks") and t.scope != skill.scope:
            continue
        if policy == "same_scope_other_tasks" and t.task_id in source_tasks:
            continue
        if policy not in PAIRWISE_POLICIES:
            raise ValueError(f"heldout={policy!r} is invalid here: the pairwise estimator takes "
                             f"{', '.join(PAIRWISE_POLICIES)} (heldout='teacher' is skills.teacher_scoring)")
        pool.append(t)
    pool.sort(key=lambda t: _order_key(skill.skill_id, t))
    return pool[:max_heldout]


def score_skills(skills: Sequence[Skill], trajectories: Sequence[Trajectory], logprob_fn: LogprobFn,
                 context_fn: ContextFn, *, policy: str, max_heldout: int) -> dict[str, SkillScore]:
    """Score every skill on its held-out set with one ``logprob_fn`` call.

    ``context_fn(r, L)`` returns the token ids of r's prompt with skill L inserted (``L=None``: the student
    prompt, used only for trajectories without ``base_logps``).
    """
    pairs: list[tuple[Skill, Trajectory]] = []
    heldout: dict[str, list[Trajectory]] = {}
    for skill in skills:
        heldout[skill.skill_id] = heldout_set(skill, trajectories, policy, max_heldout)
        pairs.extend((skill, r) for r in heldout[skill.skill_id])
    need_base = sorted({r.traj_id: r for _, r in pairs if r.base_logps is None}.values(), key=lambda r: r.traj_id)
    contexts = [context_fn(r, s) for s, r in pairs] + [context_fn(r, None) for r in need_base]
    responses = [list(r.completion_ids or []) for _, r in pairs] + [list(r.completion_ids or []) for r in need_base]
    outputs = logprob_fn(contexts, responses) if contexts else []
    if len(outputs) != len(contexts):
        raise RuntimeError(f"logprob_fn returned {len(outputs)} tensors for {len(contexts)} sequences")
    outputs = [o.detach().float().cpu().reshape(-1) for o in outputs]
    base_of: dict[str, object] = {r.traj_id: outputs[len(pairs) + i] for i, r in enumerate(need_base)}

    base_of.update({r.traj_id: r.base_logps for _, r in pairs if r.base_logps is not None})
    shifts_all = row_shifts([(r, lp, base_of[r.traj_id]) for (_, r), lp in zip(pairs, outputs)])
    results: dict[str, SkillScore] = {}
    offset = 0
    for skill in skills:
        rs = heldout[skill.skill_id]
        results[skill.skill_id] = summarize(skill.skill_id, rs, shifts_all[offset: offset + len(rs)])
        offset += len(rs)
    return results


def row_shifts(rows: Sequence[tuple[Trajectory, torch.Tensor, Sequence[float] | torch.Tensor]]) -> list[float]:
    """Delta_r of each ``(r, skill-conditioned log-probs, base log-probs)`` row, in one padded batch."""
    if not rows:
        return []
    skill_rows, base_rows, mask_rows = [], [], []
    for r, lp, base in rows:
        n = len(r.completion_ids or [])
        lp = torch.as_tensor(lp).detach().float().cpu().reshape(-1)
        base = torch.as_tensor(base, dtype=torch.float32).detach().cpu().reshape(-1)
        mask = torch.tensor(r.completion_mask, dtype=torch.float32)
        for name, vec in (("skill-conditioned log-probs", lp), ("base_logps", base), ("completion_mask", mask)):
            if vec.shape[0] != n:
                raise ValueError(f"trajectory {r.traj_id}: {name} has {vec.shape[0]} entries but "
                                 f"completion_ids has {n}; they must align token by token")
        skill_rows.append(lp)
        base_rows.append(base)
        mask_rows.append(mask)
    skill_lp, _ = pad_logprobs(skill_rows)
    base_lp, _ = pad_logprobs(base_rows, length=skill_lp.shape[1])
    mask_t, _ = pad_logprobs(mask_rows, length=skill_lp.shape[1])
    return response_shift(skill_lp, base_lp, mask_t).tolist()


def summarize(skill_id: str, heldout: Sequence[Trajectory], shifts: Sequence[float],
              notes: Sequence[str] = ()) -> SkillScore:
    """The registered scores of one candidate from its held-out rows and their shifts."""
    shifts = list(shifts)
    notes = list(notes)
    if not heldout:
        notes.append("no_heldout")
    advantages = [float(r.advantage) for r in heldout]
    successes = [bool(r.success) for r in heldout]
    values = compute_scores(shifts, advantages, successes)
    if heldout and "contrast" in values and values["contrast"] is None:
        has_pos = any(successes)
        notes.append("contrast_undefined:" + ("no_failure_heldout" if has_pos else "no_success_heldout"))
    return SkillScore(skill_id, values, len(heldout), {r.traj_id: v for r, v in zip(heldout, shifts)},
                      ";".join(notes))
