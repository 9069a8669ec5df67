"""Response-based scoring of Local candidates (Strength, Utility, Contrast) on held-out trajectories, and the
registry of selectors that rank candidates at consolidation.

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
from skillduet_plugin.core.scores import contrast, response_shift, strength, utility
from skillduet_plugin.skills.types import Skill, Trajectory

ContextFn = Callable[[Trajectory, Skill | None], list[int]]
# selector(shifts, advantages, successes) -> the candidate's score (None: undefined, ranks last)
SelectorFn = Callable[[Sequence[float], Sequence[float], Sequence[bool]], "float | None"]
PAIRWISE_POLICIES = ("same_scope", "same_scope_other_tasks", "any")

_SELECTORS: dict[str, SelectorFn] = {}


def register_selector(name: str) -> Callable[[SelectorFn], SelectorFn]:
    """Register ``fn(shifts, advantages, successes) -> float | None`` as the selector ``name``.

    Every registered selector is computed for each candidate and cached in the bank under its name;
    ``config.selector`` picks the one that ranks candidates at consolidation.
    """
    def add(fn: SelectorFn) -> SelectorFn:
        if name in _SELECTORS and _SELECTORS[name] is not fn:
            raise ValueError(f"selector {name!r} is already registered")
        _SELECTORS[name] = fn
        return fn

    return add


def get_selector(name: str) -> SelectorFn:
    """The selector registered as ``name``; the error lists the registered names."""
    if name not in _SELECTORS:
        raise KeyError(f"selector={name!r} is not registered: registered selectors are "
                       f"{', '.join(sorted(_SELECTORS))} (add one with @register_selector)")
    return _SELECTORS[name]


def registered_selectors() -> tuple[str, ...]:
    return tuple(_SELECTORS)


@register_selector("strength")
def _strength(shifts: Sequence[float], advantages: Sequence[float], successes: Sequence[bool]) -> float | None:
    return strength(shifts)


@register_selector("utility")
def _utility(shifts: Sequence[float], advantages: Sequence[float], successes: Sequence[bool]) -> float | None:
    return utility(shifts, advantages) if len(shifts) else None


@register_selector("contrast")
def _contrast(shifts: Sequence[float], advantages: Sequence[float], successes: Sequence[bool]) -> float | None:
    return contrast(shifts, successes) if len(shifts) else None


@register_selector("random")
def _random(shifts: Sequence[float], advantages: Sequence[float], successes: Sequence[bool]) -> float | None:
    # Random ranking draws its order at consolidation (core.scores.select_top with the seeded rng): no score.
    return None


@dataclass
class SkillScore:
    """Scores of one candidate; ``note`` says why a score is None (machine-readable, ``;``-separated)."""

    skill_id: str
    strength: float | None
    utility: float | None
    contrast: float | None
    n_heldout: int
    shifts: dict[str, float]
    note: str = ""

    def as_record(self) -> dict[str, float | int | str | None]:
        return {"strength": self.strength, "utility": self.utility, "contrast": self.contrast,
                "n_heldout": self.n_heldout, "note": self.note or None}


def _scorable(t: Trajectory) -> bool:
    return (t.split == "train" and bool(t.completion_ids) and t.completion_mask is not None
            and any(t.completion_mask))


def _order_key(skill_id: str, traj_id: str) -> str:
    # A per-skill pseudo-random but reproducible order, so capped held-out sets differ across skills.
    return hashlib.sha256(f"{skill_id}|{traj_id}".encode()).hexdigest()


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
    pool.sort(key=lambda t: _order_key(skill.skill_id, t.traj_id))
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
    values = {name: get_selector(name)(shifts, advantages, successes) for name in ("strength", "utility",
                                                                                   "contrast")}
    if heldout and values["contrast"] is None:
        has_pos = any(successes)
        notes.append("contrast_undefined:" + ("no_failure_heldout" if has_pos else "no_success_heldout"))
    return SkillScore(skill_id, values["strength"], values["utility"], values["contrast"], len(heldout),
                      {r.traj_id: v for r, v in zip(heldout, shifts)}, ";".join(notes))
