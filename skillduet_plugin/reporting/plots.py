"""Report plots the run plots (``runs/plots.py``) do not draw: analyzer failures per step, and several runs
side by side (one metric per figure, a line per run; success per task type as small multiples)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from skillduet_plugin.runs.plots import SUCCESS_PREFIX, pyplot, save_figure, series


def _integer_steps(ax) -> None:
    from matplotlib.ticker import MaxNLocator  # lazy: matplotlib

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def has_series(steps: Sequence[Mapping[str, Any]], key: str) -> bool:
    """Whether any per-step record holds a number under ``key``."""
    return bool(series(steps, key)[0])


def smooth(values: Sequence[float], window: int) -> list[float]:
    """Trailing moving average over ``window`` points (the first points average what exists so far)."""
    if window < 1:
        raise ValueError(f"window={window} must be >= 1")
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def plot_analyzer_failures(steps: Sequence[Mapping[str, Any]], out: str | os.PathLike, title: str = "") -> Path:
    """Analyzer failures per step (bars) against analyzer requests (line), and synthesizer failures so far."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.8))
    xs, ys = series(steps, "analyzer/failures")
    if xs:
        ax.bar(xs, ys, color="tab:red", alpha=0.75, label="analyzer failures")
    xs, ys = series(steps, "analyzer/requests")
    if xs:
        ax.plot(xs, ys, color="tab:blue", marker=".", label="analyzer requests")
    xs, ys = series(steps, "synthesizer/failures")
    if xs:
        ax.step(xs, ys, where="post", color="tab:purple", label="synthesizer failures (cumulative)")
    if not ax.patches and not ax.lines:
        ax.text(0.5, 0.5, "no analyzer metrics in this run", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("training step")
    ax.set_ylabel("count")
    ax.set_title(title or "Analyzer / synthesizer failures")
    _integer_steps(ax)
    ax.grid(alpha=0.3)
    if ax.patches or ax.lines:
        ax.legend(fontsize=8)
    return save_figure(fig, out)


def plot_compare(runs: Sequence[tuple[str, Sequence[Mapping[str, Any]]]], key: str, out: str | os.PathLike, *,
                 ylabel: str = "", title: str = "", window: int = 1, ylim: tuple[float, float] | None = None) -> Path:
    """One metric of several runs on shared axes: ``runs`` is ``[(label, step_records), ...]``.

    ``window > 1`` draws the raw points faintly and a trailing moving average over them.
    """
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (label, steps) in enumerate(runs):
        xs, ys = series(steps, key)
        if not xs:
            continue
        color = colors[i % len(colors)]
        if window > 1:
            ax.plot(xs, ys, color=color, alpha=0.25, linewidth=1)
            ax.plot(xs, smooth(ys, window), color=color, linewidth=2, label=label)
        else:
            ax.plot(xs, ys, color=color, linewidth=1.8, marker=".", label=label)
    if not ax.lines:
        ax.text(0.5, 0.5, f"no run logs {key}", ha="center", va="center", transform=ax.transAxes)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.set_xlabel("training step")
    ax.set_ylabel(ylabel or key)
    ax.set_title(title or key)
    _integer_steps(ax)
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=8)
    return save_figure(fig, out)


def task_types(runs: Sequence[tuple[str, Sequence[Mapping[str, Any]]]]) -> list[str]:
    """Task types with a ``success/<type>`` series in any run, sorted."""
    return sorted({k[len(SUCCESS_PREFIX):] for _, steps in runs for r in steps for k in r
                   if k.startswith(SUCCESS_PREFIX)})


def plot_compare_task_types(runs: Sequence[tuple[str, Sequence[Mapping[str, Any]]]], out: str | os.PathLike, *,
                            window: int = 1, title: str = "") -> Path:
    """Success per task type, one panel per type, a line per run (shared y axis 0..1)."""
    plt = pyplot()
    types = task_types(runs) or ["(none)"]
    cols = min(3, len(types))
    rows = math.ceil(len(types) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False, sharey=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for idx, t in enumerate(types):
        ax = axes[idx // cols][idx % cols]
        for i, (label, steps) in enumerate(runs):
            xs, ys = series(steps, SUCCESS_PREFIX + t)
            if xs:
                ax.plot(xs, smooth(ys, window) if window > 1 else ys, color=colors[i % len(colors)],
                        linewidth=1.6, label=label)
        ax.set_title(t, fontsize=9)
        ax.set_ylim(-0.03, 1.03)
        ax.grid(alpha=0.3)
        ax.set_xlabel("training step", fontsize=8)
        _integer_steps(ax)
    for idx in range(len(types), rows * cols):
        axes[idx // cols][idx % cols].axis("off")
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="upper right", fontsize=8)
    fig.suptitle(title or "Success rate per task type")
    return save_figure(fig, out)
