"""The teacher check: does a Local skill make the policy a better player? SkillDuet's OPD teacher is the policy
with a trajectory's Local skill in its prompt; it can only teach what that skill changes. This plays tasks twice
with the same weights, once as the teacher (the task's Local skill inserted as ``teacher_messages`` inserts it)
and once as the student (the prompt as rolled out), and reports both success rates.

Used per training step by the TRL and verl trainers (``teacher_check_samples``: held-out episodes, never trained
on; both log :func:`check_metrics`) and after RL by the run's evaluation (the pre-RL model with each game's first
Local skill: the teacher RL started from). Framework-free: the caller plays the episodes
(``play(task_ids, student_fns) -> episodes``).
"""

from __future__ import annotations

from statistics import fmean
from typing import Any, Callable, Mapping, Sequence

from skillduet_plugin.rollout.collector import lifecycle_student_fn
from skillduet_plugin.rollout.engine import Episode, StudentFn
from skillduet_plugin.skills.types import Skill

#: ``play(task_ids, student_fns)``: one episode per task id, each first prompt built by its ``student_fns`` entry.
PlayFn = Callable[[list[str], list[StudentFn | None]], Sequence[Episode]]

#: The per-step metrics of the check, the same names on TRL and verl (plotted by ``runs.plots.plot_mechanism``).
CHECK_METRICS = ("teacher_check/success_with_local", "teacher_check/success_without_local",
                 "teacher_check/difference")

#: The order in which a task's Local skills are preferred for its teacher: a paired group's shared skill (what
#: distinguishes its success from its failure), then a success's procedure, then a failure's correction.
KIND_ORDER = ("shared", "procedure", "correction")


def local_skill_fn(lifecycle: Any, skill: Skill) -> StudentFn:
    """The teacher's prompt builder for one Local skill: ``lifecycle.teacher_messages`` (the Global in force, if
    the lifecycle uses one, then the ``## Hindsight skill`` section), exactly the OPD teacher's context."""

    def build(prompt: list[dict[str, str]], task: str, scope: str) -> tuple[list[dict[str, str]], int | None]:
        version = lifecycle.global_for(scope).version if lifecycle.config.use_global else None
        return lifecycle.teacher_messages(prompt, task=task, scope=scope, local_skill=skill,
                                          global_version=version), version

    return build


def skills_by_task(task_ids: Sequence[str], row_skills: Sequence[Skill | None]) -> dict[str, Skill]:
    """Per task, in first-seen order, the Local skill of its first row that has one (a step's teacher plan:
    ``TeacherPlan.skills`` row by row)."""
    if len(task_ids) != len(row_skills):
        raise ValueError(f"{len(row_skills)} row skills for {len(task_ids)} rows")
    chosen: dict[str, Skill] = {}
    for task_id, skill in zip(task_ids, row_skills):
        if skill is not None and str(task_id) not in chosen:
            chosen[str(task_id)] = skill
    return chosen


def first_skill_per_task(candidates: Sequence[Skill], task_ids: Sequence[str]) -> dict[str, Skill]:
    """Per task of ``task_ids`` (that has one), its first Local skill in a skill bank's candidates: the earliest
    step's, preferring :data:`KIND_ORDER`, then the lowest ``skill_id`` (deterministic). A candidate's task is
    ``metadata["task_id"]``, as extraction records it."""
    wanted = {str(t) for t in task_ids}
    best: dict[str, tuple[tuple[int, int, str], Skill]] = {}
    for skill in candidates:
        task = str((skill.metadata or {}).get("task_id", ""))
        if task not in wanted or skill.kind not in KIND_ORDER:
            continue
        key = (int(skill.step), KIND_ORDER.index(skill.kind), skill.skill_id)
        if task not in best or key < best[task][0]:
            best[task] = (key, skill)
    return {str(t): best[str(t)][1] for t in task_ids if str(t) in best}


def teacher_check(skills: Mapping[str, Skill], *, lifecycle: Any, samples: int, play: PlayFn) -> dict[str, Any]:
    """Play each task of ``skills`` ``samples`` times as the teacher (its Local skill in the prompt) and
    ``samples`` times as the student (``lifecycle.student_messages``: the Global when the lifecycle uses one),
    all in one lockstep batch. Returns ``teacher_success`` and ``student_success`` (mean over those episodes),
    their difference ``teacher_minus_student``, per task the wins of each (``outcomes``), ``tasks`` and
    ``episodes`` (per condition); empty rates (None) when there is no task."""
    if samples < 1:
        raise ValueError(f"samples={samples!r} must be >= 1")
    tasks = list(skills)
    ids = [t for t in tasks for _ in range(samples)]
    if not ids:
        return {"teacher_success": None, "student_success": None, "teacher_minus_student": None, "tasks": 0,
                "episodes": 0, "outcomes": {}}
    student = lifecycle_student_fn(lifecycle)
    fns: list[StudentFn | None] = [local_skill_fn(lifecycle, skills[t]) for t in ids] + [student] * len(ids)
    episodes = list(play(ids + ids, fns))
    if len(episodes) != 2 * len(ids):
        raise RuntimeError(f"play returned {len(episodes)} episodes for {2 * len(ids)} tasks")
    teacher, plain = episodes[:len(ids)], episodes[len(ids):]
    outcomes = {t: {"teacher": fmean(float(e.won) for e in teacher if e.task_id == t),
                    "student": fmean(float(e.won) for e in plain if e.task_id == t)} for t in tasks}
    t_rate, s_rate = fmean(float(e.won) for e in teacher), fmean(float(e.won) for e in plain)
    return {"teacher_success": t_rate, "student_success": s_rate, "teacher_minus_student": t_rate - s_rate,
            "tasks": len(tasks), "episodes": len(ids), "outcomes": outcomes}


def check_wins(result: Mapping[str, Any]) -> list[float]:
    """``[teacher wins, student wins, episodes per condition]`` of a :func:`teacher_check` result: what processes
    sum before :func:`check_metrics` (each plays its own tasks)."""
    n = float(result["episodes"])
    return [(result["teacher_success"] or 0.0) * n, (result["student_success"] or 0.0) * n, n]


def check_metrics(teacher_wins: float, student_wins: float, episodes: float) -> dict[str, float]:
    """The step's :data:`CHECK_METRICS` from summed wins (nothing when no episode was played)."""
    if not episodes:
        return {}
    values = (teacher_wins / episodes, student_wins / episodes, (teacher_wins - student_wins) / episodes)
    return dict(zip(CHECK_METRICS, values))


__all__ = ["CHECK_METRICS", "KIND_ORDER", "PlayFn", "check_metrics", "check_wins", "first_skill_per_task",
           "local_skill_fn", "skills_by_task", "teacher_check"]
