"""After RL, the teacher RL started from against the student it trained: the mechanism chain's last link.

SkillDuet's claim at the parameter level is that OPD moves what the skill-conditioned teacher knows into the
student. On the RL training tasks this measures the teacher before RL (the model before RL with each game's first
Local skill from the run's bank, ``rollout.teacher_check.first_skill_per_task``, as a ``## Hindsight skill``, no
Global) and the same after RL, greedily and sampled, beside the student before and after RL without any skill
(the run's own training-task measurements); ``teacher_summary`` pairs them over the same games.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Sequence

from skillduet_plugin.rollout.teacher_check import first_skill_per_task, local_skill_fn
from skillduet_plugin.runs.environment import make_pool
from skillduet_plugin.runs.evaluate import (GlobalCondition, episode_limits, eval_lifecycle, play_panel,
                                            sampled_summary, summarize)
from skillduet_plugin.runs.rundir import write_json

#: The four measurements of :func:`teacher_summary`: (label, which model, with the Local skill).
ROLES = (("student_before", "before", False), ("teacher_before", "before", True),
         ("student_after", "after", False), ("teacher_after", "after", True))


def evaluate_local_skills(model: Any, tokenizer: Any, config: Any, task_ids: Sequence[str], bank_path: str | Path,
                          *, split: str, samples: int, log: Callable[[str], None] = print) -> dict[str, Any] | None:
    """``model`` on ``task_ids`` (of ``split``) with each task's first Local skill in its first prompt: greedy
    (``conditions.local``) and, with ``samples`` > 0, sampled at the run's temperature from a generator seeded by
    the run's seed (``sampled``). ``skills``: per task the Local skill used. None when the bank holds no Local
    skill of any of these tasks (a GRPO run)."""
    bank = Path(bank_path)
    if not bank.exists():
        return None
    lifecycle = eval_lifecycle(str(bank), config.method_config(), tokenizer, use_global=False)
    pool = make_pool(config, split)
    try:
        skills = first_skill_per_task(lifecycle.bank.candidates(), task_ids)
        tasks = [t for t in task_ids if t in skills]
        if not tasks:
            return None
        fns = [local_skill_fn(lifecycle, skills[t]) for t in tasks]
        limits = dict(episode_limits(config), pool=pool)
        t0 = time.time()
        episodes = play_panel(model, tokenizer, tasks, condition=GlobalCondition("none"), student_fns=fns, **limits)
        greedy = {**summarize(episodes, config.env), "seconds": round(time.time() - t0, 1)}
        results: dict[str, Any] = {"conditions": {"local": greedy}, "panel": split, "panel_size": len(tasks),
                                   "skills": {t: {"skill_id": skills[t].skill_id, "kind": skills[t].kind,
                                                  "step": skills[t].step, "text": skills[t].text} for t in tasks}}
        log(f"eval [Local skill]: success {greedy['success']:.3f} on {len(tasks)} tasks ({greedy['seconds']}s)")
        if samples > 0:
            results["sampled"] = sampled_summary(model, tokenizer, tasks, samples=samples, seed=config.seed,
                                                 temperature=config.temperature, student_fns=fns, **limits)
            log(f"eval [Local skill, sampled x{samples}]: success {results['sampled']['success']:.3f}")
        return results
    finally:
        pool.close()
        lifecycle.close()


def _outcomes(result: dict[str, Any] | None, sampled: bool) -> dict[str, float] | None:
    """Per task success of one measurement (greedy: its only condition; sampled: the mean of its episodes)."""
    if not result:
        return None
    if sampled:
        return (result.get("sampled") or {}).get("outcomes")
    conditions = result.get("conditions") or {}
    return next(iter(conditions.values()), {}).get("outcomes") if conditions else None


def teacher_summary(measured: dict[str, dict[str, Any] | None]) -> dict[str, Any] | None:
    """The four measurements of :data:`ROLES` (``measured[label]``: an evaluation result; the students are the
    run's ``before_train``/``after_train``) on the tasks the teachers were measured on, greedy and sampled: each
    rate, and the paired differences ``teacher_before - student_before`` (how much the teacher knows that the
    student does not) and ``student_after - teacher_before`` (how much of it the student holds after RL), each
    with a paired 95% bootstrap interval over those tasks. None without a teacher measurement."""
    from skillduet_plugin.core.stats import bootstrap_interval  # lazy: imports numpy

    if not measured.get("teacher_before"):
        return None
    out: dict[str, Any] = {}
    for mode in ("greedy", "sampled"):
        tasks = sorted(_outcomes(measured["teacher_before"], mode == "sampled") or {})
        rates = {label: r for label, _, _ in ROLES
                 if (r := _outcomes(measured.get(label), mode == "sampled")) and all(t in r for t in tasks)}
        if not tasks or "student_after" not in rates:
            continue
        block: dict[str, Any] = {"tasks": len(tasks)}
        block.update({label: sum(values[t] for t in tasks) / len(tasks) for label, values in rates.items()})
        for a, b in (("teacher_before", "student_before"), ("student_after", "teacher_before")):
            if a in rates and b in rates:  # a study measures the student before RL once, for all its runs
                iv = bootstrap_interval([[rates[a][t] for t in tasks]], [[rates[b][t] for t in tasks]])
                block[f"{a} - {b}"] = {"estimate": iv.estimate, "low": iv.low, "high": iv.high, "tasks": len(tasks)}
        out[mode] = block
    return out or None


def teacher_line(summary: dict[str, Any]) -> str:
    """One printed line: teacher before RL, student after RL, their difference (greedy, and sampled)."""
    parts = []
    for mode in ("greedy", "sampled"):
        b = summary.get(mode)
        if not b:
            continue
        d = b["student_after - teacher_before"]
        first = f"student before {100 * b['student_before']:.1f}%, " if "student_before" in b else ""
        parts.append(f"{mode}: {first}teacher before {100 * b['teacher_before']:.1f}%, student after "
                     f"{100 * b['student_after']:.1f}% (after - teacher {100 * d['estimate']:+.1f}, 95% CI "
                     f"{100 * d['low']:+.1f} to {100 * d['high']:+.1f}), teacher after "
                     f"{100 * b['teacher_after']:.1f}%")
    tasks = (summary.get("greedy") or summary.get("sampled") or {}).get("tasks", 0)
    return f"teacher (each game's first Local skill) vs student on {tasks} RL games: " + "; ".join(parts)


def measure_teachers(config: Any, run: Any, trained: Any, tokenizer: Any, task_ids: Sequence[str],
                     load_before: Callable[[], Any], students: tuple[dict | None, dict | None],
                     log: Callable[[str], None] = print) -> dict[str, Any] | None:
    """The teacher after RL (``trained``) and before RL (``load_before()``: the model RL started from) on the
    measured RL training tasks, written to ``eval/teacher_after_train.json`` / ``teacher_before_train.json``;
    returns :func:`teacher_summary` with ``students`` = the run's (before, after) training-task results."""
    split, samples = config.train_split, config.samples_for(config.train_split)
    measured: dict[str, dict[str, Any] | None] = {"student_before": students[0], "student_after": students[1]}
    for label, model in (("teacher_after", trained), ("teacher_before", None)):
        model = model if model is not None else load_before()
        result = evaluate_local_skills(model, tokenizer, config, task_ids, run.bank, split=split, samples=samples,
                                       log=lambda m, role=label: log(f"{m} [{role.replace('_', ' ')} RL]"))
        if result is None:
            return None
        measured[label] = result
        write_json(run.eval_dir / f"{label}_train.json", result)
    return teacher_summary(measured)


__all__ = ["ROLES", "evaluate_local_skills", "measure_teachers", "teacher_line", "teacher_summary"]
