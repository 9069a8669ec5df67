"""Strength (and every other registered score) from the OPD teacher pass (``heldout="teacher"``, the default estimator).

The teacher pass already computes log p(y_r | context_r + L) for every trajectory r whose teacher context is
the Local skill L, and the trainer already holds r's base log-probs log p(y_r | context_r) (the rollout's old
log-probs, or TRL's loss forward when it keeps none). A group with a success and a failure shares ONE skill,
extracted from two of its trajectories and assigned to all of them: its other trajectories did not produce
the skill, so they are held-out rows of L whose shift Delta_r(L) costs no forward ("free rows").

Candidates without free rows (the per-trajectory skills of all-success / all-failure groups, a shared skill of a
two-trajectory group) are handled in this order:

1. a near-duplicate candidate of the same scope that has rows lends its score (``near_duplicate_of:<id>``):
   a repeated skill is scored once;
2. the remaining ones, one representative per near-duplicate cluster, get extra (L, r) forwards over the
   same-scope held-out pool of the pairwise estimator, round-robin (every candidate one row before any gets a
   second), until the step's token budget (``scoring_budget`` x the step's rollout tokens) is spent;
3. what the budget does not reach stays unscored (``budget``) and ranks below every scored candidate.

The shift and the scores are the same functions as the pairwise estimator's (``skills.scoring``); only which
rows form H_L differs. Free rows are the whole teacher-assigned set minus the sources (no cap: they are free).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import torch

from skillduet_plugin.skills.scoring import (ContextFn, LogprobFn, SkillScore, _scorable, heldout_set, row_shifts,
                                             summarize)
from skillduet_plugin.skills.similarity import SimilarityFn, lexical_matrix
from skillduet_plugin.skills.types import Skill, Trajectory

PairKey = tuple[str, str]  # (skill_id, traj_id)


@dataclass
class ScoringPlan:
    """Which rows score each candidate this step.

    ``free[L]``: trajectories whose teacher context is L and that are not its sources (shift from the teacher
    pass); ``paid[L]``: trajectories needing an extra skill-conditioned forward; ``alias[L] = M``: L takes the
    scores of its near-duplicate M; ``unscored[L]``: why L has no rows (``no_heldout`` or ``budget``).
    """

    free: dict[str, list[str]] = field(default_factory=dict)
    paid: dict[str, list[str]] = field(default_factory=dict)
    alias: dict[str, str] = field(default_factory=dict)
    unscored: dict[str, str] = field(default_factory=dict)
    contexts: dict[PairKey, list[int]] = field(default_factory=dict)
    budget_tokens: int = 0
    paid_tokens: int = 0

    def paid_pairs(self) -> list[PairKey]:
        return [(sid, tid) for sid, tids in sorted(self.paid.items()) for tid in tids]

    def stats(self) -> dict[str, float]:
        return {"scoring_free_rows": float(sum(len(v) for v in self.free.values())),
                "scoring_paid_rows": float(sum(len(v) for v in self.paid.values())),
                "scoring_paid_tokens": float(self.paid_tokens),
                "scoring_budget_tokens": float(self.budget_tokens),
                "scoring_near_duplicates": float(len(self.alias)),
                "scoring_unscored_budget": float(sum(v == "budget" for v in self.unscored.values()))}


def step_tokens(trajectories: Sequence[Trajectory]) -> int:
    """Prompt + completion tokens of the step's training trajectories (the unit of ``scoring_budget``)."""
    return sum(len(t.prompt_ids or []) + len(t.completion_ids or []) for t in trajectories if t.split == "train")


def _clusters(skills: Sequence[Skill], similarity: SimilarityFn | None, threshold: float) -> list[list[Skill]]:
    """Near-duplicate clusters per scope (single link at ``similarity >= threshold``), in skill_id order."""
    out: list[list[Skill]] = []
    by_scope: dict[str, list[Skill]] = {}
    for s in sorted(skills, key=lambda s: s.skill_id):
        by_scope.setdefault(s.scope, []).append(s)
    for scope in sorted(by_scope):
        group = by_scope[scope]
        parent = list(range(len(group)))

        def find(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        if len(group) > 1:
            sim = (similarity or lexical_matrix)([s.text for s in group])
            for i in range(len(group)):
                for j in range(i + 1, len(group)):
                    if sim[i][j] >= threshold:
                        parent[find(j)] = find(i)
        members: dict[int, list[Skill]] = {}
        for i, s in enumerate(group):
            members.setdefault(find(i), []).append(s)
        out.extend(members[k] for k in sorted(members))
    return out


def plan_scoring(skills: Sequence[Skill], trajectories: Sequence[Trajectory], assignment: Mapping[str, str], *,
                 context_fn: ContextFn, budget_tokens: int, max_heldout: int, dedupe_threshold: float,
                 similarity: SimilarityFn | None = None) -> ScoringPlan:
    """The rows of every candidate: free rows from ``assignment`` (traj_id -> teacher skill_id), then aliases
    and budgeted extra rows for candidates without any (see the module docstring)."""
    plan = ScoringPlan(budget_tokens=max(0, int(budget_tokens)))
    unique = list({s.skill_id: s for s in skills}.values())  # exact duplicates: one skill
    for s in unique:
        sources = set(s.source_traj_ids)
        plan.free[s.skill_id] = sorted(t.traj_id for t in trajectories
                                       if assignment.get(t.traj_id) == s.skill_id and t.traj_id not in sources
                                       and _scorable(t))
    needy: list[Skill] = []
    for cluster in _clusters(unique, similarity, dedupe_threshold):
        donors = sorted((s for s in cluster if plan.free[s.skill_id]),
                        key=lambda s: (-len(plan.free[s.skill_id]), s.skill_id))
        lacking = [s for s in cluster if not plan.free[s.skill_id]]
        if not lacking:
            continue
        rep = donors[0] if donors else lacking[0]
        if not donors:
            needy.append(rep)
        for s in lacking:
            if s.skill_id != rep.skill_id:
                plan.alias[s.skill_id] = rep.skill_id
    pools = {s.skill_id: heldout_set(s, trajectories, "same_scope", max_heldout) for s in needy}
    for s in needy:
        plan.paid[s.skill_id] = []
        if not pools[s.skill_id]:
            plan.unscored[s.skill_id] = "no_heldout"
    active = [s for s in needy if pools[s.skill_id]]
    for k in range(max_heldout):  # round-robin: every candidate one row before any gets a second
        still = []
        for s in active:
            if k >= len(pools[s.skill_id]):
                continue
            r = pools[s.skill_id][k]
            ctx = context_fn(r, s)
            cost = len(ctx) + len(r.completion_ids or [])
            if plan.paid_tokens + cost > plan.budget_tokens:
                continue  # this candidate stops here; shorter rows of others may still fit
            plan.contexts[(s.skill_id, r.traj_id)] = ctx
            plan.paid[s.skill_id].append(r.traj_id)
            plan.paid_tokens += cost
            still.append(s)
        active = still
    for s in needy:
        if pools[s.skill_id] and not plan.paid[s.skill_id]:
            plan.unscored[s.skill_id] = "budget"
    return plan


def paid_logprobs(plan: ScoringPlan, trajectories: Sequence[Trajectory],
                  logprob_fn: LogprobFn) -> dict[PairKey, torch.Tensor]:
    """The extra skill-conditioned forwards of ``plan`` in ONE ``logprob_fn`` call (run with the rollout weights)."""
    pairs = plan.paid_pairs()
    if not pairs:
        return {}
    by_id = {t.traj_id: t for t in trajectories}
    outputs = logprob_fn([plan.contexts[p] for p in pairs], [list(by_id[tid].completion_ids or []) for _, tid in pairs])
    if len(outputs) != len(pairs):
        raise RuntimeError(f"logprob_fn returned {len(outputs)} tensors for {len(pairs)} sequences")
    return {p: o.detach().float().cpu().reshape(-1) for p, o in zip(pairs, outputs)}


def teacher_rows_needed(plan: ScoringPlan) -> set[str]:
    """Trajectories whose teacher log-probs the plan reads."""
    return {tid for tids in plan.free.values() for tid in tids}


def score_from_plan(skills: Sequence[Skill], trajectories: Sequence[Trajectory], plan: ScoringPlan,
                    teacher_logps: Mapping[str, torch.Tensor | Sequence[float]],
                    paid: Mapping[PairKey, torch.Tensor], *,
                    base_logps: Mapping[str, torch.Tensor | Sequence[float]] | None = None) -> dict[str, SkillScore]:
    """Scores of every candidate from the teacher pass (free rows) and the extra forwards (paid rows).

    Args:
        teacher_logps: traj_id -> log p(y_r | context_r + its teacher skill), per completion token.
        paid: (skill_id, traj_id) -> log p(y_r | context_r + L) of the extra forwards.
        base_logps: traj_id -> base log-probs; default: ``Trajectory.base_logps``.
    A row whose teacher or base log-probs are missing is dropped and counted in the note (``missing_rows:n``).
    """
    by_id = {t.traj_id: t for t in trajectories}
    base_of: dict[str, object] = {t.traj_id: t.base_logps for t in trajectories if t.base_logps is not None}
    base_of.update(base_logps or {})
    rows: list[tuple[str, Trajectory, object]] = []
    missing: dict[str, int] = {}
    for s in {s.skill_id: s for s in skills}.values():
        sid = s.skill_id
        for tid in plan.free.get(sid, []):
            lp = teacher_logps.get(tid)
            if lp is None or tid not in base_of:
                missing[sid] = missing.get(sid, 0) + 1
                continue
            rows.append((sid, by_id[tid], lp))
        for tid in plan.paid.get(sid, []):
            if tid not in base_of or (sid, tid) not in paid:
                missing[sid] = missing.get(sid, 0) + 1
                continue
            rows.append((sid, by_id[tid], paid[(sid, tid)]))
    shifts = row_shifts([(r, lp, base_of[r.traj_id]) for _, r, lp in rows])  # type: ignore[misc]
    per_skill: dict[str, tuple[list[Trajectory], list[float]]] = {}
    for (sid, r, _), v in zip(rows, shifts):
        held, vals = per_skill.setdefault(sid, ([], []))
        held.append(r)
        vals.append(v)
    results: dict[str, SkillScore] = {}
    for s in skills:
        sid = s.skill_id
        if sid in plan.alias:
            continue
        held, vals = per_skill.get(sid, ([], []))
        notes = [f"missing_rows:{missing[sid]}"] if missing.get(sid) else []
        if plan.unscored.get(sid) == "budget":
            notes.append("budget")
        results[sid] = summarize(sid, held, vals, notes)
        if plan.unscored.get(sid) == "budget":  # "no_heldout" is not the reason here
            results[sid].note = ";".join(n for n in results[sid].note.split(";") if n != "no_heldout")
    for sid, rep in plan.alias.items():
        src = results[rep]
        results[sid] = SkillScore(sid, dict(src.values), src.n_heldout, dict(src.shifts), f"near_duplicate_of:{rep}")
    return results


def score_teacher_pass(skills: Sequence[Skill], trajectories: Sequence[Trajectory], assignment: Mapping[str, str],
                       teacher_logps: Mapping[str, torch.Tensor | Sequence[float]], logprob_fn: LogprobFn,
                       context_fn: ContextFn, *, budget_tokens: int, max_heldout: int,
                       dedupe_threshold: float, similarity: SimilarityFn | None = None,
                       ) -> tuple[dict[str, SkillScore], ScoringPlan]:
    """Plan, run the paid forwards and the teacher rows the caller did not supply (e.g. ``opd_coef=0``: no
    teacher pass exists) in ONE ``logprob_fn`` call, and score. Trajectories need ``base_logps``."""
    plan = plan_scoring(skills, trajectories, assignment, context_fn=context_fn, budget_tokens=budget_tokens,
                        max_heldout=max_heldout, similarity=similarity, dedupe_threshold=dedupe_threshold)
    by_skill = {s.skill_id: s for s in skills}
    by_traj = {t.traj_id: t for t in trajectories}
    teacher = dict(teacher_logps)
    extra = [(assignment[tid], tid) for tid in sorted(teacher_rows_needed(plan) - set(teacher))]
    batch = ScoringPlan(paid={k: list(v) for k, v in plan.paid.items()}, contexts=dict(plan.contexts))
    for sid, tid in extra:  # the teacher rows nobody computed, in the same call as the paid rows
        batch.contexts[(sid, tid)] = context_fn(by_traj[tid], by_skill[sid])
        batch.paid.setdefault(sid, []).append(tid)
    out = paid_logprobs(batch, trajectories, logprob_fn)
    for sid, tid in extra:
        teacher[tid] = out.pop((sid, tid))
    return score_from_plan(skills, trajectories, plan, teacher, out), plan


__all__ = ["ScoringPlan", "paid_logprobs", "plan_scoring", "score_from_plan", "score_teacher_pass", "step_tokens",
           "teacher_rows_needed"]
