"""Build the report of one or several runs: a summary table, the run plots, the Global versions with their diffs,
the ranked Local skills, the evaluations (Table-3 rows) and (for several runs) the curves side by side. Written as
Markdown (images in a folder next to it, linked relatively) and as one self-contained HTML page beside it."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from tqdm.auto import tqdm

from skillduet_plugin.reporting.html import render_html
from skillduet_plugin.reporting.plots import (has_series, plot_analyzer_failures, plot_compare, plot_compare_task_types,
                                              task_types)
from skillduet_plugin.reporting.runs import RunData, load_run, unique_labels
from skillduet_plugin.reporting.skills_report import global_versions_section, ranked_skills_section
from skillduet_plugin.runs import plots as run_plots

TAIL_STEPS = 5  # "final" figures are the mean over the last few logged steps (single steps are noisy)


def _tail_mean(steps: Sequence[Mapping[str, Any]], key: str, n: int = TAIL_STEPS) -> float | None:
    values = [float(r[key]) for r in steps if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)]
    if not values:
        return None
    tail = values[-n:]
    return sum(tail) / len(tail)


def _total(steps: Sequence[Mapping[str, Any]], key: str) -> float | None:
    values = [float(r[key]) for r in steps if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)]
    return sum(values) if values else None


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 1e4 else f"{value:.0f}"
    return str(value)


def _tokenizer_for(run: RunData) -> Any:
    """The run's tokenizer from its saved final model (Global token counts); None: count whitespace words."""
    folder = run.root / "final_model"
    if not (folder / "tokenizer_config.json").is_file():
        return None
    try:
        from transformers import AutoTokenizer  # lazy: transformers

        return AutoTokenizer.from_pretrained(folder)
    except Exception:  # a report must not fail on an unreadable tokenizer
        return None


def _consolidations(run: RunData) -> int:
    versions = run_plots.global_sizes(run.bank)
    return len({v["step"] for v in versions})


def summary_rows(runs: Sequence[RunData], labels: Sequence[str]) -> list[list[str]]:
    """One row per run: label, method, env, model, steps, final success, consolidations, failures."""
    rows = []
    for run, label in zip(runs, labels):
        cfg = run.config
        last = run.steps[-1]["step"] if run.steps else None
        # per-step counts summed; without them, the last cumulative counter the lifecycle logged
        failures = _total(run.steps, "skills/step_analyzer_failures")
        if failures is None:
            failures = _tail_mean(run.steps, "analyzer/failures", 1)
        rows.append([label, run.method or "–", str(cfg.get("env", "–")), str(cfg.get("model", "–")), _fmt(last),
                     _fmt(_tail_mean(run.steps, "success")), _fmt(_consolidations(run)),
                     _fmt(_tail_mean(run.steps, "global/tokens", 1)), _fmt(failures)])
    return rows


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    return lines


def _flat(data: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Scalar leaves of nested dicts as ``(dotted.key, value)`` (lists are skipped: tables stay readable)."""
    if isinstance(data, Mapping):
        out = []
        for k, v in data.items():
            out += _flat(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    if isinstance(data, (int, float, str, bool)) or data is None:
        return [(prefix, data)]
    return []


def _image(lines: list[str], md_dir: Path, png: Path, alt: str) -> None:
    rel = os.path.relpath(png, md_dir).replace(os.sep, "/")
    lines += [f"![{alt}]({rel})", ""]


def _run_section(run: RunData, label: str, index: int, assets: Path, md_dir: Path, level: str) -> list[str]:
    lines = [f"{level} {label}", "", f"Run directory: `{run.root}`", ""]
    stem = f"run{index}"
    steps = run.steps
    lines += [f"{level}# Learning curve (overall and per task type)", ""]
    _image(lines, md_dir, run_plots.plot_success(steps, assets / f"{stem}_success.png", title=f"{label}: success"),
           "learning curve")
    lines += [f"{level}# OPD gate", ""]
    if any(k.startswith("opd/") for r in steps for k in r):
        _image(lines, md_dir, run_plots.plot_opd(steps, assets / f"{stem}_opd.png", title=f"{label}: OPD gate"),
               "OPD gate")
    else:
        lines += ["No OPD metrics in this run (no teacher pass, e.g. plain GRPO).", ""]
    lines += [f"{level}# Strength per consolidation", ""]
    strengths = run_plots.strength_by_consolidation(run.bank)
    _image(lines, md_dir, run_plots.plot_strength(strengths, assets / f"{stem}_strength.png",
                                                  title=f"{label}: candidate Strength"), "Strength")
    if strengths:
        rows = [[str(s), str(len(v)), _fmt(sum(v) / len(v) if v else None), _fmt(max(v) if v else None)]
                for s, v in sorted(strengths.items())]
        lines += _table(["consolidation step", "scored candidates", "mean Strength", "max Strength"], rows) + [""]
    lines += [f"{level}# Global size and token count", ""]
    tokenizer = _tokenizer_for(run)
    versions = run_plots.global_sizes(run.bank, tokenizer)
    _image(lines, md_dir, run_plots.plot_global_size(steps, versions, assets / f"{stem}_global.png",
                                                     title=f"{label}: Global size"), "Global size")
    if versions:
        unit = "tokens" if tokenizer is not None else "tokens (whitespace words: no tokenizer in final_model/)"
        rows = [[str(v["step"]), v["scope"], str(v["version"]), str(v["items"]), str(v["tokens"])] for v in versions]
        lines += _table(["step", "scope", "version", "items", unit], rows) + [""]
    else:
        lines += ["No Global version in the skill bank (no consolidation yet, or no bank).", ""]
    lines += global_versions_section(run.bank, level) + ranked_skills_section(run.bank, level)
    lines += [f"{level}# Analyzer failures", ""]
    _image(lines, md_dir, plot_analyzer_failures(steps, assets / f"{stem}_analyzer.png",
                                                 title=f"{label}: analyzer failures"), "analyzer failures")
    if run.evaluations:
        lines += [f"{level}# Evaluation (Table-3 rows)", ""]
        for name, data in run.evaluations.items():
            lines += [f"`{name}`", ""] + _evaluation_table(data) + [""]
    return lines


def _evaluation_table(data: Any) -> list[str]:
    """A condition x metric table for ``{"conditions": {name: {success, avg, score, per_type: {...}}}}``
    evaluations; any other JSON as a flat metric/value table of its scalars."""
    conditions = data.get("conditions") if isinstance(data, Mapping) else None
    if isinstance(conditions, Mapping) and conditions and all(isinstance(c, Mapping) for c in conditions.values()):
        types = sorted({t for c in conditions.values() for t in (c.get("per_type") or {})})
        cols = [k for k in ("success", "avg", "score", "episodes") if any(k in c for c in conditions.values())]
        rows = [[str(name)] + [_fmt(c.get(k)) for k in cols] + [_fmt((c.get("per_type") or {}).get(t)) for t in types]
                for name, c in conditions.items()]
        return _table(["condition"] + cols + types, rows)
    flat = [(k, v) for k, v in _flat(data) if not isinstance(v, str) or len(v) < 80]
    return _table(["metric", "value"], [[k, _fmt(v)] for k, v in flat]) if flat else ["(no scalar values)"]


def _side_by_side(runs: Sequence[RunData], labels: Sequence[str], assets: Path, md_dir: Path,
                  window: int) -> list[str]:
    pairs = [(label, run.steps) for run, label in zip(runs, labels)]
    lines = ["## Side by side", ""]
    if window > 1:
        lines += [f"Thick lines: trailing mean over {window} steps; faint lines: raw per-step values.", ""]
    _image(lines, md_dir, plot_compare(pairs, "success", assets / "compare_success.png", ylabel="rollout success",
                                       title="Success rate", window=window, ylim=(-0.03, 1.03)), "success")
    if task_types(pairs):
        _image(lines, md_dir, plot_compare_task_types(pairs, assets / "compare_task_types.png", window=window),
               "success per task type")
    for key, ylabel, title, name in (
            ("opd/gate_mean", "mean gate", "OPD gate (mean)", "compare_opd_gate.png"),
            ("global/tokens", "tokens", "Global token count", "compare_global_tokens.png"),
            ("analyzer/failures", "failures", "Analyzer failures per step", "compare_analyzer.png")):
        if any(has_series(steps, key) for _, steps in pairs):
            _image(lines, md_dir, plot_compare(pairs, key, assets / name, ylabel=ylabel, title=title), title)
    return lines


def build_report(run_dirs: Sequence[str | os.PathLike], out: str | os.PathLike | None = None, *,
                 labels: Sequence[str] | None = None, window: int | None = None, html: bool = True) -> Path:
    """Write the Markdown report of ``run_dirs`` to ``out`` (and the HTML page ``<out stem>.html`` beside it
    unless ``html`` is False); return the Markdown file's path.

    Args:
        run_dirs: one or more run directories (each holds ``metrics.jsonl``; ``config.yaml`` and
            ``skill_bank.sqlite`` are read when present).
        out: the Markdown file (default: ``<RUN_DIR>/report.md`` for one run, ``./skillduet-report.md`` for
            several). Images go to ``<out stem>_files/`` beside it.
        labels: names of the runs in the report (default: ``<name> (<method>)`` from each config).
        window: moving-average window of the side-by-side curves (default: about a tenth of the longest run).
    """
    if not run_dirs:
        raise ValueError("run_dirs is empty: pass at least one run directory")
    if labels is not None and len(labels) != len(run_dirs):
        raise ValueError(f"{len(labels)} labels for {len(run_dirs)} run directories: give one label per run")
    runs = [load_run(d, None if labels is None else labels[i]) for i, d in enumerate(run_dirs)]
    names = unique_labels(runs)
    if out is None:
        out = runs[0].root / "report.md" if len(runs) == 1 else Path("skillduet-report.md")
    md = Path(out).expanduser().resolve()
    if md.suffix.lower() != ".md":
        raise ValueError(f"--out {out} must name a Markdown file ending in .md")
    assets = md.with_name(md.stem + "_files")
    assets.mkdir(parents=True, exist_ok=True)
    if window is None:
        longest = max((len(r.steps) for r in runs), default=0)
        window = max(1, longest // 10)
    title = "SkillDuet run report" if len(runs) == 1 else "SkillDuet runs compared"
    lines = [f"# {title}", "", f"Generated {time.strftime('%Y-%m-%d %H:%M:%S')} by `skillduet report`.", ""]
    header = ["run", "method", "env", "model", "last step", f"success (last {TAIL_STEPS})", "consolidations",
              "Global tokens", "analyzer failures"]
    lines += _table(header, summary_rows(runs, names)) + [""]
    if len(runs) > 1:
        lines += _side_by_side(runs, names, assets, md.parent, window)
    level = "##" if len(runs) == 1 else "###"
    if len(runs) > 1:
        lines += ["## Each run", ""]
    # one bar tick per run (plots and the bank read take seconds each); silent when stderr is not a terminal
    for i, (run, name) in enumerate(tqdm(list(zip(runs, names)), desc="report", unit="run", leave=False,
                                         disable=None)):
        lines += _run_section(run, name, i, assets, md.parent, level)
    md.parent.mkdir(parents=True, exist_ok=True)
    md.write_text("\n".join(lines).rstrip() + "\n")
    if html:
        md.with_suffix(".html").write_text(render_html(lines, md.parent, title))
    return md
