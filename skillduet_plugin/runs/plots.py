"""PNG plots of a run from its ``metrics.jsonl``, ``summary.json`` and skill bank (matplotlib, Agg): success per task
type, OPD gate statistics, the mechanism chain (teacher check, teacher vs student after RL), the Strength
distribution of each consolidation's candidates, and the Global's size.

Each ``plot_*`` takes plain data (metric records, bank-derived lists) and an output path, so ``skillduet
report`` can reuse them on several runs; :func:`plot_run` draws all of them for one run directory.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from skillduet_plugin.runs.rundir import BANK_FILE, read_metrics, step_records
from skillduet_plugin.skills.bank import SkillBank
from skillduet_plugin.skills.budget import count_tokens

SUCCESS_PREFIX = "success/"
OPD_KEYS = ("opd/gate_mean", "opd/gate_active_ratio", "opd/teacher_minus_student", "opd/loss")


def pyplot():
    """matplotlib's pyplot on the file-only Agg backend (no display needed)."""
    import matplotlib  # lazy: matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt  # lazy: matplotlib

    return plt


def series(records: Sequence[Mapping[str, Any]], key: str) -> tuple[list[int], list[float]]:
    """``(steps, values)`` of the metric ``key`` over the records that carry a number for it."""
    xs, ys = [], []
    for r in records:
        value = r.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            xs.append(int(r["step"]))
            ys.append(float(value))
    return xs, ys


def save_figure(fig, out: str | os.PathLike) -> Path:
    """Write ``fig`` as a PNG (folders created) and close it."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
    return path


def plot_success(records: Sequence[Mapping[str, Any]], out: str | os.PathLike, title: str = "") -> Path:
    """Training success rate per step: overall (thick) and per task type (``success/<type>`` keys)."""
    plt = pyplot()
    records = step_records(records)
    fig, ax = plt.subplots(figsize=(7, 4))
    xs, ys = series(records, "success")
    if xs:
        ax.plot(xs, ys, color="black", linewidth=2.5, label="all", marker="o", markersize=3)
    types = sorted({k[len(SUCCESS_PREFIX):] for r in records for k in r if k.startswith(SUCCESS_PREFIX)})
    for t in types:
        xs, ys = series(records, SUCCESS_PREFIX + t)
        if xs:
            ax.plot(xs, ys, linewidth=1.2, label=t, marker=".", alpha=0.85)
    ax.set_xlabel("training step")
    ax.set_ylabel("rollout success rate")
    ax.set_ylim(-0.03, 1.03)
    ax.set_title(title or "Success rate per task type")
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=8, ncol=2)
    return save_figure(fig, out)


def plot_opd(records: Sequence[Mapping[str, Any]], out: str | os.PathLike, title: str = "") -> Path:
    """OPD gate statistics per step: mean gate, share of tokens with gate > 0.5, mean t - s, loss."""
    plt = pyplot()
    records = step_records(records)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for key in ("opd/gate_mean", "opd/gate_active_ratio"):
        xs, ys = series(records, key)
        if xs:
            axes[0].plot(xs, ys, marker=".", label=key.split("/", 1)[1])
    axes[0].set_ylim(-0.03, 1.03)
    axes[0].set_title("gate")
    for key in ("opd/teacher_minus_student", "opd/loss"):
        xs, ys = series(records, key)
        if xs:
            axes[1].plot(xs, ys, marker=".", label=key.split("/", 1)[1])
    axes[1].axhline(0.0, color="gray", linewidth=0.8)
    axes[1].set_title("teacher - student log-prob, OPD loss")
    for ax in axes:
        ax.set_xlabel("training step")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    fig.suptitle(title or "OPD gate statistics")
    return save_figure(fig, out)


TEACHER_CHECK_KEYS = ("teacher_check/success_with_local", "teacher_check/success_without_local")
ROLE_LABELS = {"student_before": "student\nbefore RL", "teacher_before": "teacher\nbefore RL",
               "student_after": "student\nafter RL", "teacher_after": "teacher\nafter RL"}


def plot_mechanism(records: Sequence[Mapping[str, Any]], teacher: Mapping[str, Any] | None,
                   out: str | os.PathLike, title: str = "") -> Path:
    """The mechanism chain of a run: per step the teacher check (held-out success with and without the Local
    skill), per step the OPD teacher - student log-prob on the supervised tokens (the decisive ones in choose
    mode) with the gate's open share, and after RL the student and the teacher before and after RL on the RL
    games (``summary["teacher"]``, sampled when measured, else greedy)."""
    plt = pyplot()
    records = step_records(records)
    fig, axes = plt.subplots(1, 4, figsize=(18, 3.8))
    for key, label in zip(TEACHER_CHECK_KEYS, ("with Local skill (teacher)", "without (student)")):
        xs, ys = series(records, key)
        if xs:
            axes[0].plot(xs, ys, marker="o", markersize=3, label=label)
    axes[0].set_ylim(-0.03, 1.03)
    axes[0].set_title("teacher check: held-out success")
    xs, ys = series(records, "opd/teacher_minus_student")
    if xs:
        axes[1].plot(xs, ys, marker=".", color="tab:purple", label="teacher - student log-prob")
    axes[1].axhline(0.0, color="gray", linewidth=0.8)
    gate = axes[1].twinx()
    xs, ys = series(records, "opd/gate_active_ratio")
    if xs:
        gate.plot(xs, ys, marker=".", color="tab:green", label="gate open share")
        gate.set_ylim(-0.03, 1.03)
        gate.legend(fontsize=8, loc="lower right")
    axes[1].set_title("OPD on the supervised tokens")
    for ax in axes[:2]:
        ax.set_xlabel("training step")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8, loc="upper left")
    block = (teacher or {}).get("sampled") or (teacher or {}).get("greedy")
    if block:
        mode = "sampled" if (teacher or {}).get("sampled") else "greedy"
        roles = [k for k in ROLE_LABELS if k in block]
        axes[2].bar(range(len(roles)), [block[k] for k in roles], alpha=0.8,
                    color=["tab:orange" if k.startswith("teacher") else "tab:blue" for k in roles])
        axes[2].set_xticks(range(len(roles)), [ROLE_LABELS[k] for k in roles], fontsize=8)
        axes[2].set_title(f"RL games, {mode} ({block['tasks']} games)")
    else:
        axes[2].text(0.5, 0.5, "no teacher measured", ha="center", va="center", transform=axes[2].transAxes)
    axes[2].set_ylim(0, 1.03)
    axes[2].set_ylabel("success")
    _plot_last_link(axes[3], records)
    fig.suptitle(title or "Mechanism: does the Local skill make a better teacher, and does the student learn it?")
    return save_figure(fig, out)


LAST_LINK_KEYS = (("opd/choice/teacher_prob_teacher_top", "teacher", "tab:orange"),
                  ("opd/choice/student_prob_teacher_top", "student", "tab:blue"),
                  ("opd/choice/deciding_share", "turns where they differ", "tab:gray"),
                  ("opd/update_share", "OPD share of the update norm", "tab:purple"))


def _plot_last_link(ax, records: Sequence[Mapping[str, Any]]) -> None:
    """Per step, on the decision turns of the rows with a Local skill (choose mode): each model's probability of
    the teacher's first choice, the share of turns where the two first choices differ, and OPD's share of the
    update norm (``opd_update_share``)."""
    drawn = False
    for key, label, color in LAST_LINK_KEYS:
        xs, ys = series(records, key)
        if xs:
            ax.plot(xs, ys, marker=".", color=color, label=label, linestyle="--" if "share" in key else "-")
            drawn = True
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel("training step")
    ax.set_title("the last link: the teacher's first choice")
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=7, loc="best")
    else:
        ax.text(0.5, 0.5, "not measured (choose mode with Local skills)", ha="center", va="center",
                transform=ax.transAxes, fontsize=8)


def strength_by_consolidation(bank_path: str | os.PathLike) -> dict[int, list[float]]:
    """Consolidation step -> Strength scores of the Local candidates it chose from (made since the previous
    consolidation, all scopes). Candidates without a score are left out."""

    if not Path(bank_path).exists():
        return {}
    bank = SkillBank(bank_path, readonly=True)
    try:
        steps = sorted({v.step for v in bank.history()})
        result: dict[int, list[float]] = {}
        previous = None
        for step in steps:
            skills = bank.candidates(since_step=previous, until_step=step)
            result[step] = [float(s.scores["strength"]) for s in skills
                            if isinstance(s.scores.get("strength"), (int, float))]
            previous = step
        return result
    finally:
        bank.close()


def global_sizes(bank_path: str | os.PathLike, tokenizer: Any = None) -> list[dict[str, Any]]:
    """Per Global version: ``step``, ``scope``, ``version``, ``items`` and ``tokens`` (whitespace words when no
    tokenizer is given)."""

    if not Path(bank_path).exists():
        return []
    bank = SkillBank(bank_path, readonly=True)
    try:
        return [{"step": v.step, "scope": v.scope, "version": v.version, "items": len(v.items),
                 "tokens": count_tokens(v.text, tokenizer)} for v in bank.history()]
    finally:
        bank.close()


def plot_strength(strengths: Mapping[int, Sequence[float]], out: str | os.PathLike, title: str = "") -> Path:
    """Box plot (with the points) of candidate Strength at each consolidation step."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    steps = [s for s in sorted(strengths) if len(strengths[s])]
    if steps:
        data = [list(strengths[s]) for s in steps]
        ax.boxplot(data, positions=range(len(steps)), widths=0.5, showfliers=False)
        for i, values in enumerate(data):
            jitter = [i + 0.12 * ((k % 5) - 2) / 2 for k in range(len(values))]
            ax.scatter(jitter, values, s=10, alpha=0.6)
        ax.set_xticks(range(len(steps)), [str(s) for s in steps])
    else:
        ax.text(0.5, 0.5, "no scored candidates yet", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("consolidation at step")
    ax.set_ylabel("Strength |Δ log p|")
    ax.set_title(title or "Strength of Local candidates per consolidation")
    ax.grid(alpha=0.3)
    return save_figure(fig, out)


def plot_global_size(records: Sequence[Mapping[str, Any]], versions: Sequence[Mapping[str, Any]],
                     out: str | os.PathLike, title: str = "") -> Path:
    """Global size over training: total items and tokens from the step metrics (``global/items``,
    ``global/tokens``), and each scope's versions from the bank as points."""
    plt = pyplot()
    records = step_records(records)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, key in zip(axes, ("items", "tokens")):
        xs, ys = series(records, f"global/{key}")
        if xs:
            ax.step(xs, ys, where="post", color="black", linewidth=2, label="all scopes")
        scopes = sorted({v["scope"] for v in versions})
        for scope in scopes:
            pts = [(v["step"], v[key]) for v in versions if v["scope"] == scope]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", linestyle="--", label=scope)
        ax.set_xlabel("training step")
        ax.set_ylabel(key)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8, ncol=2)
    axes[0].set_title("Global items")
    axes[1].set_title("Global tokens")
    fig.suptitle(title or "Global size")
    return save_figure(fig, out)


def plot_run(run_dir: str | os.PathLike, out_dir: str | os.PathLike | None = None, tokenizer: Any = None) -> list[Path]:
    """All plots of one run directory into ``out_dir`` (default ``<run>/plots``); returns the PNG paths."""
    run = Path(run_dir)
    out = Path(out_dir) if out_dir is not None else run / "plots"
    records = read_metrics(run)
    bank = run / BANK_FILE
    summary = json.loads((run / "summary.json").read_text()) if (run / "summary.json").is_file() else {}
    return [
        plot_success(records, out / "success_per_task_type.png"),
        plot_opd(records, out / "opd_gate.png"),
        plot_mechanism(records, summary.get("teacher"), out / "mechanism.png"),
        plot_strength(strength_by_consolidation(bank), out / "strength_per_consolidation.png"),
        plot_global_size(records, global_sizes(bank, tokenizer), out / "global_size.png"),
    ]
