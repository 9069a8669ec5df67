"""The report of a ``skillduet study`` directory: ``report.md`` with two PNGs (learning curves; panel success
with bootstrap intervals), built from what the runs wrote (``metrics.jsonl``, ``eval/*.json``, ``summary.json``).

Panel numbers are means over seeds x panel tasks with percentile-bootstrap 95% intervals
(:func:`core.stats.bootstrap_interval`); differences between arms are paired by seed (the seeds both arms
finished, same panel: ``study_aims.paired``). Runs that have not finished are listed, not guessed.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from skillduet_plugin.core.stats import Interval, bootstrap_interval
from skillduet_plugin.envs.registry import env_names, env_spec
from skillduet_plugin.reporting.study_aims import (SAMPLED, SAMPLED_LEARNED, aims_section, outcome_matrix,
                                                   outcome_tasks, paired, with_sampled)
from skillduet_plugin.reporting.study_mechanism import mechanism_section
from skillduet_plugin.runs import plots as run_plots
from skillduet_plugin.runs.rundir import read_metrics, step_records
from skillduet_plugin.study import (BEFORE_FILE, BEFORE_TRAIN_FILE, NEUTRAL_FILE, STUDY_FILE, StudySpec, arm_overlay,
                                    is_complete, plan, run_dir)

CONDITION_ROWS = (("none", "None"), ("neutral", "Length-matched neutral"), ("learned", "Learned Global"))


@dataclass
class ArmData:
    """The finished runs of one arm, seed by seed."""

    arm: str
    label: str
    seeds: list[int] = field(default_factory=list)
    curves: list[list[tuple[int, float]]] = field(default_factory=list)  # per seed: (step, rollout success)
    reward_curves: list[list[tuple[int, float]]] = field(default_factory=list)  # per seed: (step, env reward)
    evals: list[dict[str, dict[str, Any]]] = field(default_factory=list)  # per seed: condition -> summary
    train_evals: list[dict[str, dict[str, Any]]] = field(default_factory=list)  # the RL training tasks, per seed
    rl_seconds: list[float] = field(default_factory=list)
    eval_seconds: list[float] = field(default_factory=list)
    missing: list[int] = field(default_factory=list)
    runs: list[Path] = field(default_factory=list)  # the finished run folders, seed by seed


def _read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def load_study(root: str | os.PathLike) -> tuple[StudySpec, dict[str, Any], list[ArmData]]:
    """``(spec, before-RL panel results, arms)`` of a study directory."""
    root = Path(root)
    stored = _read(root / STUDY_FILE)
    if not stored:
        raise FileNotFoundError(f"{root} is not a study directory: it holds no {STUDY_FILE}")
    spec = StudySpec(**stored["spec"])
    use_global = {}
    arms = {a: ArmData(a, arm_overlay(a)[0]) for a in spec.arms}
    for r in plan(spec):
        path = run_dir(root, r)
        overlay = arm_overlay(r.arm)[1]
        use_global[r.arm] = bool(overlay.get("use_global", True))
        data = arms[r.arm]
        if not is_complete(path, use_global[r.arm]):
            data.missing.append(r.seed)
            continue
        steps = step_records(read_metrics(path))
        data.seeds.append(r.seed)
        data.runs.append(path)
        data.curves.append([(int(s["step"]), float(s["success"])) for s in steps if "success" in s])
        data.reward_curves.append([(int(s["step"]), float(s["env_reward"])) for s in steps if "env_reward" in s])
        after = with_sampled(_read(path / "eval" / "after.json"))
        neutral = _read(path / "eval" / NEUTRAL_FILE).get("conditions", {})
        data.evals.append({**after, **neutral})
        data.train_evals.append(with_sampled(_read(path / "eval" / "after_train.json")))
        data.rl_seconds.append(sum(float(s.get("time/step_s", 0.0)) for s in steps))
        summary = _read(path / "summary.json")
        data.eval_seconds.append(float(summary.get("time/eval_after_s", 0.0) or 0.0)
                                 + sum(float(c.get("seconds", 0.0)) for c in neutral.values()))
    return spec, _read(root / BEFORE_FILE), list(arms.values())


def _ci(matrix: list[list[float]] | None, other: list[list[float]] | None = None) -> Interval | None:
    """The mean of ``matrix`` (or its paired difference to ``other``, whose rows are already the same seeds in
    the same order: one arm's conditions, or the one before-RL row repeated). Two arms are compared through
    ``study_aims.paired``, which pairs their runs by seed."""
    if matrix is None or (other is not None and (len(other) != len(matrix) or len(other[0]) != len(matrix[0]))):
        return None
    return bootstrap_interval(matrix, other)


def _pct(iv: Interval | None, signed: bool = False) -> str:
    if iv is None:
        return "–"
    f = "{:+.1f}" if signed else "{:.1f}"
    return f"{f.format(100 * iv.estimate)} [{f.format(100 * iv.low)}, {f.format(100 * iv.high)}]"


def _verdict(iv: Interval | None) -> str:
    if iv is None:
        return "not comparable"
    if iv.low > 0:
        return "above, beyond the interval"
    if iv.high < 0:
        return "below, beyond the interval"
    return "no difference beyond the interval"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + \
           ["| " + " | ".join(r) + " |" for r in rows]


def _tail(curve: list[tuple[int, float]], n: int = 3) -> float | None:
    vals = [v for _, v in curve[-n:]]
    return sum(vals) / len(vals) if vals else None


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


# ---------------------------------------------------------------------- plots
def plot_curves(arms: Sequence[ArmData], out: Path) -> Path:
    """Rollout success per step: mean over seeds (line) and min-max over seeds (band), one colour per arm."""
    plt = run_plots.pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for data in arms:
        by_step: dict[int, list[float]] = {}
        for curve in data.curves:
            for step, v in curve:
                by_step.setdefault(step, []).append(v)
        if not by_step:
            continue
        xs = sorted(by_step)
        mean = [sum(by_step[x]) / len(by_step[x]) for x in xs]
        line, = ax.plot(xs, mean, marker="o", markersize=3, label=f"{data.label} (n={len(data.seeds)})")
        ax.fill_between(xs, [min(by_step[x]) for x in xs], [max(by_step[x]) for x in xs],
                        color=line.get_color(), alpha=0.15, linewidth=0)
    from matplotlib.ticker import MaxNLocator  # lazy: matplotlib

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("RL step")
    ax.set_ylabel("rollout success")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("Rollout success per step (mean over seeds; band: min-max)")
    ax.legend(fontsize=8)
    return run_plots.save_figure(fig, out)


def plot_panel(rows: Sequence[tuple[str, Interval | None]], types: dict[str, list[tuple[str, Interval | None]]],
               out: Path) -> Path:
    """Panel success with 95% bootstrap intervals: overall per arm (left), per task type (right)."""
    plt = run_plots.pyplot()
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [1, 2]})
    shown = [(label, iv) for label, iv in rows if iv is not None]
    for i, (label, iv) in enumerate(shown):
        ax.errorbar([i], [100 * iv.estimate], yerr=[[100 * (iv.estimate - iv.low)], [100 * (iv.high - iv.estimate)]],
                    fmt="o", capsize=4)
    ax.set_xticks(range(len(shown)), [label for label, _ in shown], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("panel success after RL (%)")
    ax.set_ylim(-3, 103)
    ax2.set_ylim(-3, 103)
    ax.set_title("Panel success (95% bootstrap CI)")
    type_names = list(types)
    width = 0.8 / max(1, len(rows))
    for j, (label, _) in enumerate(rows):
        xs, ys, lo, hi = [], [], [], []
        for k, t in enumerate(type_names):
            iv = dict(types[t]).get(label)
            if iv is not None:
                xs.append(k + (j - (len(rows) - 1) / 2) * width)
                ys.append(100 * iv.estimate)
                lo.append(100 * (iv.estimate - iv.low))
                hi.append(100 * (iv.high - iv.estimate))
        if xs:
            ax2.errorbar(xs, ys, yerr=[lo, hi], fmt="o", capsize=3, label=label, markersize=4)
    ax2.set_xticks(range(len(type_names)), type_names, fontsize=8)
    ax2.set_title("Per task type" if type_names else "Per task type (one type only)")
    if type_names:
        ax2.legend(fontsize=7)
    return run_plots.save_figure(fig, out)


# ---------------------------------------------------------------------- the report
def _wall_rows(arms: Sequence[ArmData]) -> list[list[str]]:
    rows = []
    for d in arms:
        rl, ev = _mean(d.rl_seconds), _mean(d.eval_seconds)
        rows.append([d.label, str(len(d.seeds)), "–" if rl is None else f"{rl:.0f}",
                     "–" if ev is None else f"{ev:.0f}", f"{sum(d.rl_seconds) + sum(d.eval_seconds):.0f}"])
    return rows


def build_study_report(root: str | os.PathLike) -> Path:
    """Write ``<root>/report.md`` (+ ``curves.png``, ``panel.png``); returns the Markdown path."""
    root = Path(root)
    spec, before, arms = load_study(root)
    stored = _read(root / STUDY_FILE)
    base = stored.get("base", {})
    before_m = outcome_matrix([before.get("conditions", {})]) if before else None

    overall = [("Before RL", _ci(before_m))] + [(a.label, _ci(outcome_matrix(a.evals))) for a in arms]
    before_s = outcome_matrix([with_sampled(before)], SAMPLED) if before else None
    sampled = any(outcome_matrix(a.evals, SAMPLED) is not None for a in arms)
    all_types = sorted({t for a in arms for ev in a.evals for t in ev.get("none", {}).get("per_type", {})})
    per_type = {t: [("Before RL", _ci(outcome_matrix([before.get("conditions", {})], task_type=t)))
                    if before else ("Before RL", None)]
                + [(a.label, _ci(outcome_matrix(a.evals, task_type=t))) for a in arms] for t in all_types}
    plot_curves(arms, root / "curves.png")
    plot_panel(overall, per_type if len(all_types) > 1 else {}, root / "panel.png")

    lines = [f"# SkillDuet study: {base.get('env', '?')}", "",
             f"Written {time.strftime('%Y-%m-%d %H:%M')}. Arms: {', '.join(spec.arms)}; seeds: "
             f"{', '.join(map(str, spec.seeds))}; {base.get('steps')} RL steps of {base.get('tasks_per_step')} tasks "
             f"x {base.get('num_generations')} rollouts each; panel {base.get('eval_panel')} "
             f"({(before or {}).get('panel_size', '?')} tasks, greedy"
             f"{_sampled_note(before)}); every run starts from the same warm-started model.", "",
             "Reproduce: `skillduet study " + " ".join(
                 ([spec.config] if spec.config else []) + list(spec.overrides)
                 + [f"--methods {','.join(spec.arms)}", f"--seeds {','.join(map(str, spec.seeds))}"]
                 + (["--quick"] if spec.quick else [])) + "`", ""]
    missing = [f"{a.arm} seed {s}" for a in arms for s in a.missing]
    if missing:
        lines += [f"**Not finished** (left out of every number below): {', '.join(missing)}.", ""]
    lines += ["## Panel success after RL", "",
              "Mean over seeds x panel tasks, % with the 95% percentile-bootstrap interval (seeds and tasks "
              "resampled).", ""]
    before_none = (before or {}).get("conditions", {}).get("none", {})
    scored = _scored(base.get("env"))

    def extra(score: float | None, curves: list[list[tuple[int, float]]]) -> list[str]:
        if not scored:  # ALFWorld: the score is the success
            return []
        tails = [t for t in (_tail(c) for c in curves) if t is not None]
        return ["–" if score is None else f"{100 * score:.1f}", "–" if not tails else f"{100 * _mean(tails):.1f}"]

    def sampled_cell(matrix: list[list[float]] | None) -> list[str]:
        return [_pct(_ci(matrix))] if sampled else []

    rows = [["Before RL (shared model)", "1", _pct(overall[0][1]),
             "–" if before_none.get("avg") is None else f"{100 * before_none['avg']:.1f}", "–"]
            + extra(before_none.get("score"), []) + sampled_cell(before_s)]
    for a, (_, iv) in zip(arms, overall[1:]):
        tails = [t for t in (_tail(c) for c in a.curves) if t is not None]
        avg = _mean([ev["none"]["avg"] for ev in a.evals if "none" in ev])
        score = _mean([ev["none"]["score"] for ev in a.evals if "score" in ev.get("none", {})])
        rows.append([a.label, str(len(a.seeds)), _pct(iv), "–" if avg is None else f"{100 * avg:.1f}",
                     "–" if not tails else f"{100 * _mean(tails):.1f}"] + extra(score, a.reward_curves)
                    + sampled_cell(outcome_matrix(a.evals, SAMPLED)))
    header = ["Method", "Seeds", "Success %", "Avg over types %", "Rollout success, last 3 steps %"]
    header += ["Score (mean over seeds)", "Rollout score, last 3 steps"] if scored else []
    header += ["Sampled success %"] if sampled else []
    lines += _table(header, rows) + ["", "![panel](panel.png)", ""]
    lines += aims_section(arms, _pct, _verdict, _table)
    if all_types:
        lines += ["## Per task type", ""]
        lines += _table(["Method"] + all_types, [[label] + [_pct(dict(per_type[t])[label]) for t in all_types]
                                                 for label, _ in overall]) + [""]
    lines += _conclusions(arms)
    lines += _training_section(arms, _read(root / BEFORE_TRAIN_FILE))
    lines += ["## Learning curves", "", "![curves](curves.png)", ""]
    lines += mechanism_section(arms, _read(root / BEFORE_TRAIN_FILE), root)
    lines += _table3(arms)
    lines += ["## Wall time", "", "RL: the sum of the step times in `metrics.jsonl` (resumed runs included); "
              "eval: the after-RL panel (+ the neutral condition).", ""]
    lines += _table(["Method", "Seeds", "RL s per run", "Eval s per run", "Total s"], _wall_rows(arms)) + [""]
    out = root / "report.md"
    tmp = out.with_name(f".report.md.tmp-{os.getpid()}")
    tmp.write_text("\n".join(lines))
    os.replace(tmp, out)
    return out


def _training_section(arms: Sequence[ArmData], before: dict[str, Any]) -> list[str]:
    """Success on the RL training tasks themselves (greedy and sampled, without a Global and, after RL for an arm
    with one, with its learned Global): what RL learned on the games it played, kept apart from the panel, which is
    never trained on."""
    if not before or not any(any(ev for ev in a.train_evals) for a in arms):
        return []
    lines = ["## The RL training tasks (not a held-out result)", "",
             f"The {before.get('panel_size', '?')} tasks of split `{before.get('panel', '?')}` that RL trained on, "
             "played greedily without a Global before RL (the shared model) and after RL (each run), and after RL "
             "also with its learned Global for a method that builds one (compared with the shared model without "
             f"one){_sampled_note(before)}. This measures what RL learned on the games it practised; the panel above "
             "measures transfer.", ""]
    for condition, how in (("none", "greedy"), (SAMPLED, "sampled policy"), ("learned", "greedy, learned Global"),
                           (SAMPLED_LEARNED, "sampled policy, learned Global")):
        # before RL there is no Global: the learned rows are measured against the shared model without one
        before_cond = {"learned": "none", SAMPLED_LEARNED: SAMPLED}.get(condition, condition)
        before_m = outcome_matrix([with_sampled(before)], before_cond)
        if before_m is None or (condition in ("learned", SAMPLED_LEARNED)
                                and not any(outcome_matrix(a.train_evals, condition) for a in arms if a.seeds)):
            continue
        rows = [["Before RL (shared model)", "1", _pct(_ci(before_m)), "–", "–"]]
        mats = {}
        for a in arms:
            evs = [ev for ev in a.train_evals if ev]
            m = outcome_matrix(evs, condition) if len(evs) == len(a.evals) and evs else None
            mats[a.arm] = m
            gain = None
            if m is not None and outcome_tasks(evs, condition) == outcome_tasks([with_sampled(before)], before_cond):
                gain = _ci(m, [before_m[0]] * len(m))
            rows.append([a.label, str(len(evs)), _pct(_ci(m)), _pct(gain, signed=True), _verdict(gain)])
        lines += _table(["Method", "Seeds", f"Success % ({how})", "After - before (points)", "Verdict"], rows)
        lines += [""]
        pairs = [(a.arm, "grpo") for a in arms if a.arm != "grpo"] + [("strength", "random")]
        by_arm = {a.arm: a for a in arms if a.seeds}
        comp = []
        for x, y in pairs:
            if mats.get(x) is not None and mats.get(y) is not None:
                iv, seeds = paired(by_arm, x, condition, y, condition, "train")
                comp.append([f"{by_arm[x].label} - {by_arm[y].label}", str(len(seeds)), _pct(iv, signed=True),
                             _verdict(iv)])
        if comp:
            lines += _table([f"Comparison (training tasks, {how})", "Common seeds", "Difference", "Verdict"],
                            comp) + [""]
    return lines


def _sampled_note(result: dict[str, Any] | None) -> str:
    """``; sampled policy: 4 episodes per task at temperature 1.0`` when the evaluation sampled too."""
    sampled = (result or {}).get("sampled")
    if not sampled:
        return ""
    return (f"; sampled policy: {sampled.get('samples', '?')} episodes per task at temperature "
            f"{sampled.get('temperature', '?')}, a task's success the mean of them")


def _scored(env: str | None) -> bool:
    """True for environments whose score is not just the success (WebShop: the paper reports both)."""

    return bool(env) and env in env_names() and not env_spec(env).report.per_type_report


def _table3(arms: Sequence[ArmData]) -> list[str]:
    """The Table-3 protocol per arm that builds a Global: the same final weights under no Global, the
    length-matched neutral text and the learned Global, with paired differences."""
    lines = ["## Does the learned Global help? (Table-3 protocol)", "",
             "Same final weights, same panel; only the skill section differs. % with 95% bootstrap intervals.", ""]
    rows = []
    for a in arms:
        mats = {c: outcome_matrix(a.evals, c) for c, _ in CONDITION_ROWS}
        if not a.evals or mats["learned"] is None:
            continue
        rows.append([a.label] + [_pct(_ci(mats[c])) for c, _ in CONDITION_ROWS]
                    + [_pct(_ci(mats["learned"], mats["none"]), signed=True),
                       _pct(_ci(mats["learned"], mats["neutral"]), signed=True)])
    if not rows:
        return lines + ["No arm has a learned Global to evaluate (or none was consolidated yet).", ""]
    return lines + _table(["Method"] + [label for _, label in CONDITION_ROWS]
                          + ["Learned - none", "Learned - neutral"], rows) + [""]


def _conclusions(arms: Sequence[ArmData]) -> list[str]:
    """The paper's comparisons, each a paired difference with its interval and what it says."""
    by_arm = {a.arm: a for a in arms if a.evals}
    pairs = [(a, "grpo") for a in by_arm if a != "grpo"] + [("strength", "random"), ("strength", "local_only")]
    lines = ["## What the numbers say", "",
             "Paired differences of panel success after RL (points, 95% bootstrap interval over the seeds both "
             "arms finished x tasks). With few seeds and a small panel the intervals are wide: \"no difference "
             "beyond the interval\" is not evidence of equality.", ""]
    rows = []
    for a, b in pairs:
        if a in by_arm and b in by_arm:
            iv, seeds = paired(by_arm, a, "none", b, "none", "panel")
            rows.append([f"{by_arm[a].label} - {by_arm[b].label}", str(len(seeds)), _pct(iv, signed=True),
                         _verdict(iv)])
    if not rows:
        return lines + ["Fewer than two arms have finished runs.", ""]
    return lines + _table(["Comparison", "Common seeds", "Difference", "Verdict"], rows) + [""]
