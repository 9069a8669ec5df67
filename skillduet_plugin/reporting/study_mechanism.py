"""The mechanism chain in a study report, per arm with Local skills: is the OPD teacher (the policy with a Local
skill) a better player than the student, does OPD have something to distil (teacher - student log-prob, gate
open share), and after RL does the student without any skill reach the teacher RL started from?

Read from each finished run's ``metrics.jsonl`` (``teacher_check/*``, ``opd/*``) and ``eval/*_train.json``
(the teachers before and after RL, ``runs.teacher_eval``), with the study's own ``before_train.json`` as the
student before RL. Intervals are percentile bootstraps over seeds and steps (per-step rows) or seeds and games.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from skillduet_plugin.core.stats import Interval, bootstrap_interval
from skillduet_plugin.runs import plots as run_plots
from skillduet_plugin.runs.rundir import read_metrics, step_records

STEP_KEYS = ("teacher_check/success_with_local", "teacher_check/success_without_local", "teacher_check/difference",
             "opd/teacher_minus_student", "opd/gate_active_ratio")


def _read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def _step_matrix(runs: Sequence[Path], key: str) -> list[list[float]] | None:
    """``(seeds, steps)`` values of ``key`` on the steps every run logged it; None when a run has none."""
    per_run = []
    for path in runs:
        per_run.append({int(r["step"]): float(r[key]) for r in step_records(read_metrics(path))
                        if isinstance(r.get(key), (int, float))})
    steps = sorted(set.intersection(*(set(v) for v in per_run))) if per_run else []
    return [[v[s] for s in steps] for v in per_run] if steps else None


def _outcomes(result: dict[str, Any], sampled: bool) -> dict[str, float] | None:
    if sampled:
        return (result.get("sampled") or {}).get("outcomes")
    conditions = result.get("conditions") or {}
    return next(iter(conditions.values()), {}).get("outcomes") if conditions else None


def _role_matrices(runs: Sequence[Path], before_train: dict[str, Any], sampled: bool) -> dict[str, list[list[float]]]:
    """``(seeds, games)`` outcomes of the student and teacher before and after RL, on the RL games that have a
    teacher in every run (the student before RL is the study's shared measurement, repeated per seed)."""
    files = {"teacher_before": "teacher_before_train.json", "student_after": "after_train.json",
             "teacher_after": "teacher_after_train.json"}
    per_run = [{role: _outcomes(_read(path / "eval" / name), sampled) for role, name in files.items()}
               for path in runs]
    shared = _outcomes(before_train, sampled) if before_train else None
    if not per_run or any(r["teacher_before"] is None for r in per_run):
        return {}
    games = [g for g in per_run[0]["teacher_before"]
             if all(all(g in (r[role] or {}) for role in files) for r in per_run) and (shared is None or g in shared)]
    if not games:
        return {}
    out = {role: [[float(r[role][g]) for g in games] for r in per_run] for role in files}  # type: ignore[index]
    if shared is not None:
        out["student_before"] = [[float(shared[g]) for g in games] for _ in per_run]
    return out


def _pct(iv: Interval | None, signed: bool = False) -> str:
    if iv is None:
        return "–"
    f = "{:+.1f}" if signed else "{:.1f}"
    return f"{f.format(100 * iv.estimate)} [{f.format(100 * iv.low)}, {f.format(100 * iv.high)}]"


def _num(m: list[list[float]] | None, fmt: str = "{:+.2f}") -> str:
    values = [v for row in m or [] for v in row]
    return fmt.format(sum(values) / len(values)) if values else "–"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + \
           ["| " + " | ".join(r) + " |" for r in rows]


def mechanism_section(arms: Sequence[Any], before_train: dict[str, Any], out_dir: Path) -> list[str]:
    """The report's mechanism section (and ``mechanism.png``) for the arms whose runs have Local skills
    (``arm.runs``: the finished run folders); nothing when none has."""
    keys = ("opd/teacher_minus_student", "opd/choice/deciding_share")
    with_local = [a for a in arms if a.runs and any(_step_matrix(a.runs, k) is not None for k in keys)]
    if not with_local:
        return []
    lines = ["## The mechanism chain: teacher, distillation, student", "",
             "Per RL step (mean over steps and seeds, 95% bootstrap interval over seeds and steps): the teacher check "
             "(each step's tasks played with their Local skill, the OPD teacher, and without it, the student; "
             "held-out episodes, never trained on), the OPD teacher - student log-prob on the supervised tokens "
             "(the decisive tokens in choose mode) and the share of them where the gate is open (teacher above "
             "student).", ""]
    rows = []
    for a in with_local:
        m = {k: _step_matrix(a.runs, k) for k in STEP_KEYS}
        diff = bootstrap_interval(m[STEP_KEYS[2]]) if m[STEP_KEYS[2]] else None
        rows.append([a.label, str(len(a.runs)), _num(m[STEP_KEYS[0]], "{:.1%}"), _num(m[STEP_KEYS[1]], "{:.1%}"),
                     _pct(diff, signed=True), _num(m["opd/teacher_minus_student"]),
                     _num(m["opd/gate_active_ratio"], "{:.1%}")])
    lines += _table(["Method", "Seeds", "Teacher check: with Local skill", "without", "Difference (points)",
                     "Teacher - student log-prob", "Gate open share"], rows) + [""]
    for sampled, how in ((True, "sampled policy"), (False, "greedy")):
        rows = []
        for a in with_local:
            mats = _role_matrices(a.runs, before_train, sampled)
            if not mats:
                continue
            ci = {role: bootstrap_interval(m) for role, m in mats.items()}
            gap = bootstrap_interval(mats["teacher_before"], mats["student_before"]) if "student_before" in mats \
                else None
            reach = bootstrap_interval(mats["student_after"], mats["teacher_before"])
            rows.append([a.label, f"{len(mats['teacher_before'])} x {len(mats['teacher_before'][0])}",
                         _pct(ci.get("student_before")), _pct(ci["teacher_before"]), _pct(ci["student_after"]),
                         _pct(ci["teacher_after"]), _pct(gap, signed=True), _pct(reach, signed=True)])
        if rows:
            lines += [f"After RL, on the RL games ({how}; each game's teacher is the model with the game's first "
                      "Local skill of that run, no Global):", ""]
            lines += _table(["Method", "Seeds x games", "Student before RL", "Teacher before RL", "Student after RL",
                             "Teacher after RL", "Teacher - student, before RL", "Student after - teacher before"],
                            rows) + [""]
    lines += _last_link(with_local)
    plot_mechanism(with_local, out_dir / "mechanism.png")
    return lines + ["![mechanism](mechanism.png)", ""]


LINK_KEY = "opd/choice/student_prob_teacher_top"


def _last_link(arms: Sequence[Any], edge: int = 3) -> list[str]:
    """The last link, per arm (choose mode): on each step's decision turns of the rows with a Local skill, the
    student's probability of the teacher's first choice over its first and last ``edge`` logged steps (the change
    with an interval over seeds), the teacher's, the share of turns where the two first choices differ, and OPD's
    share of the update norm."""
    rows = []
    for a in arms:
        student = _step_matrix(a.runs, LINK_KEY)
        if not student or len(student[0]) < 2 * edge:
            continue
        first = [sum(r[:edge]) / edge for r in student]
        last = [sum(r[-edge:]) / edge for r in student]
        change = bootstrap_interval([[y - x] for x, y in zip(first, last)])
        rows.append([a.label, str(len(student)), f"{sum(first) / len(first):.1%}", f"{sum(last) / len(last):.1%}",
                     _pct(change, signed=True), _num(_step_matrix(a.runs, "opd/choice/teacher_prob_teacher_top"),
                                                     "{:.1%}"),
                     _num(_step_matrix(a.runs, "opd/choice/deciding_share"), "{:.1%}"),
                     _num(_step_matrix(a.runs, "opd/update_share"), "{:.1%}")])
    if not rows:
        return []
    return [f"The last link (choose mode): on each step's decision turns of the rows with a Local skill, at the "
            f"rollout weights, the student's probability of the teacher's first choice over the first and the last "
            f"{edge} steps (the change with a 95% interval over seeds), the teacher's own probability of it, the "
            f"share of turns where the two first choices differ, and OPD's share of the update norm (the OPD "
            f"term's gradient norm over the sum of both terms').", ""] + \
        _table(["Method", "Seeds", f"Student p(teacher's choice), first {edge} steps", f"last {edge} steps",
                "Change (points)", "Teacher p(its choice)", "Turns where they differ", "OPD share of the update"],
               rows) + [""]


def plot_mechanism(arms: Sequence[Any], out: Path) -> Path:
    """Per step, mean over seeds: the teacher check's difference, the OPD teacher - student log-prob and the
    student's probability of the teacher's first choice (choose mode), one colour per arm."""
    plt = run_plots.pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(16, 3.8))
    for ax, key, title in ((axes[0], "teacher_check/difference", "teacher check: with - without Local skill"),
                           (axes[1], "opd/teacher_minus_student", "OPD teacher - student log-prob"),
                           (axes[2], LINK_KEY, "student p(teacher's first choice)")):
        for a in arms:
            m = _step_matrix(a.runs, key)
            if m:
                steps = [s for s, _ in enumerate(m[0], start=1)]
                ax.plot(steps, [sum(col) / len(col) for col in zip(*m)], marker="o", markersize=3, label=a.label)
        ax.axhline(0.0, color="gray", linewidth=0.8)
        ax.set_title(title)
        ax.set_xlabel("step (of those logged)")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    return run_plots.save_figure(fig, out)


__all__ = ["mechanism_section", "plot_mechanism"]
