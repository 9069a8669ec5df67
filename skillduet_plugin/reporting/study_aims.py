"""The study's aims in one table: each a paired difference (points, 95% percentile-bootstrap interval over the
seeds both arms finished x tasks) with whether it is above 0 beyond the interval.

The SkillDuet arms are compared as deployed (final weights with their learned Global, ``sampled_learned`` /
``learned``: the paper's setting, since their rollouts trained with one) and without it (Table 3's none); GRPO
and Local-only OPD have no Global and are measured without.
"""

from __future__ import annotations

from typing import Any, Sequence

from skillduet_plugin.core.stats import Interval, bootstrap_interval

SAMPLED = "sampled"
SAMPLED_LEARNED = "sampled_learned"

#: (what, arm, its condition, other arm, its condition, where): ``where`` is ``train`` (the RL games) or ``panel``
AIMS: tuple[tuple[str, str, str, str, str, str], ...] = (
    ("SkillDuet (Strength) as deployed - GRPO", "strength", SAMPLED_LEARNED, "grpo", SAMPLED, "train"),
    ("SkillDuet (Strength) as deployed - GRPO", "strength", SAMPLED_LEARNED, "grpo", SAMPLED, "panel"),
    ("SkillDuet (Strength) as deployed - GRPO", "strength", "learned", "grpo", "none", "train"),
    ("SkillDuet (Strength) as deployed - GRPO", "strength", "learned", "grpo", "none", "panel"),
    ("SkillDuet (Strength) - Local-only OPD, both without a Global", "strength", SAMPLED, "local_only", SAMPLED,
     "train"),
    ("SkillDuet (Strength) as deployed - Local-only OPD", "strength", SAMPLED_LEARNED, "local_only", SAMPLED,
     "train"),
    ("SkillDuet (Random) - Local-only OPD, both without a Global", "random", SAMPLED, "local_only", SAMPLED,
     "train"),
    ("Learned Global - none, SkillDuet (Strength)", "strength", "learned", "strength", "none", "panel"),
    ("Learned Global - none, SkillDuet (Strength)", "strength", SAMPLED_LEARNED, "strength", SAMPLED, "panel"),
    ("Learned Global - none, SkillDuet (Random)", "random", "learned", "random", "none", "panel"),
    ("SkillDuet (Strength) - SkillDuet (Random), as deployed", "strength", SAMPLED_LEARNED, "random",
     SAMPLED_LEARNED, "train"),
    ("Local-only OPD - GRPO", "local_only", SAMPLED, "grpo", SAMPLED, "train"),
)
HOW = {SAMPLED: "sampled", SAMPLED_LEARNED: "sampled", "none": "greedy", "learned": "greedy"}
WHERE = {"train": "RL games", "panel": "unseen panel"}


def with_sampled(result: dict[str, Any]) -> dict[str, Any]:
    """An evaluation's conditions, plus its sampled-policy measurements (``eval_samples`` episodes per task, a
    task's outcome the mean of them) as the pseudo-conditions ``"sampled"`` (no Global) and
    ``"sampled_learned"`` (with the learned Global) when they were made."""
    conditions = dict(result.get("conditions", {}))
    for key in (SAMPLED, SAMPLED_LEARNED):
        if result.get(key):
            conditions[key] = result[key]
    return conditions


def outcome_tasks(evals: Sequence[dict[str, dict[str, Any]]], condition: str = "none",
                  task_type: str | None = None) -> list[str] | None:
    """The task ids every seed measured under ``condition`` (only those of ``task_type`` when given), sorted, so
    that two matrices built from them pair the same game in the same column; None when a seed lacks the
    condition or measured other games."""
    tasks = None
    for ev in evals:
        cond = ev.get(condition)
        if not cond or "outcomes" not in cond:
            return None
        types = cond.get("task_types", {})
        these = sorted(t for t in cond["outcomes"] if task_type is None or types.get(t) == task_type)
        if tasks is not None and these != tasks:
            return None
        tasks = these
    return tasks or None


def outcome_matrix(evals: Sequence[dict[str, dict[str, Any]]], condition: str = "none",
                   task_type: str | None = None) -> list[list[float]] | None:
    """``(seeds, tasks)`` wins under ``condition``, columns in the order of :func:`outcome_tasks`; None when a
    seed lacks that condition or the seeds measured different games."""
    tasks = outcome_tasks(evals, condition, task_type)
    if tasks is None:
        return None
    return [[float(ev[condition]["outcomes"][t]) for t in tasks] for ev in evals]


def paired(arms: dict[str, Any], a: str, cond_a: str, b: str, cond_b: str,
           where: str) -> tuple[Interval | None, list[int]]:
    """The paired difference ``a[cond_a] - b[cond_b]`` over the seeds both arms finished, and those seeds."""
    if a not in arms or b not in arms:
        return None, []
    da, db = arms[a], arms[b]
    seeds = [s for s in da.seeds if s in db.seeds]
    if not seeds:
        return None, []

    def evals(d: Any) -> list[dict[str, Any]]:
        per_seed = dict(zip(d.seeds, d.train_evals if where == "train" else d.evals))
        return [per_seed[s] for s in seeds]

    ea, eb = evals(da), evals(db)
    if outcome_tasks(ea, cond_a) != outcome_tasks(eb, cond_b):  # other games (or none): nothing to pair
        return None, seeds
    ma, mb = outcome_matrix(ea, cond_a), outcome_matrix(eb, cond_b)
    if ma is None or mb is None:
        return None, seeds
    return bootstrap_interval(ma, mb), seeds


def aims_section(arms: Sequence[Any], fmt: Any, verdict: Any, table: Any) -> list[str]:
    """The aims table (``fmt``, ``verdict``, ``table``: the report's formatting helpers)."""
    by_arm = {a.arm: a for a in arms if a.seeds}
    rows = []
    for what, a, ca, b, cb, where in AIMS:
        iv, seeds = paired(by_arm, a, ca, b, cb, where)
        if not seeds:
            continue
        met = "yes" if iv is not None and iv.low > 0 else "no"
        rows.append([what, WHERE[where], HOW[ca], str(len(seeds)), fmt(iv, signed=True), verdict(iv), met])
    lines = ["## The aims", "",
             "Paired differences (points; 95% percentile-bootstrap interval, seeds both arms finished x tasks "
             "resampled). \"As deployed\": the SkillDuet run's final weights with its learned Global in the "
             "prompt; GRPO and Local-only OPD have none. An aim is met when the interval lies above 0.", ""]
    if not rows:
        return lines + ["No pair of arms has finished runs on common seeds.", ""]
    return lines + table(["Aim", "Games", "Decoding", "Seeds", "Difference", "Verdict", "Aim met"], rows) + [""]
