"""What a run's summary says: success before and after RL on the panel and on the RL training tasks, each
after - before difference with a paired bootstrap interval over the same tasks, and the lines printed at the end."""

from __future__ import annotations

from typing import Any

from skillduet_plugin.runs.config import RunConfig


def paired_difference(before: dict | None, after: dict | None, mode: str = "none",
                      field: str = "outcomes") -> dict[str, float] | None:
    """After minus before success (``field="scores"``: score) on the same tasks (no Global), with a paired
    percentile-bootstrap 95% interval over the tasks (``core.stats.bootstrap_interval``: both measurements
    resample the same tasks)."""
    from skillduet_plugin.core.stats import bootstrap_interval  # lazy: imports numpy

    try:
        a = after["conditions"][mode][field]  # type: ignore[index]
        b = before["conditions"]["none"][field]  # type: ignore[index]
    except (KeyError, TypeError):
        return None
    tasks = [t for t in b if t in a]
    if not tasks:
        return None
    iv = bootstrap_interval([[a[t] for t in tasks]], [[b[t] for t in tasks]])
    return {"estimate": iv.estimate, "low": iv.low, "high": iv.high, "level": iv.level, "tasks": len(tasks)}


def _differences(before: dict | None, after: dict | None) -> dict[str, Any]:
    return {"difference": paired_difference(before, after),
            "score_difference": paired_difference(before, after, field="scores"),
            "sampled": sampled_differences(before, after)}


def sampled_differences(before: dict | None, after: dict | None) -> dict[str, Any] | None:
    """Before and after success of the sampled policy (``results["sampled"]``: a task's outcome is the mean of
    its episodes) and their paired differences; None unless both measured it."""
    b, a = (before or {}).get("sampled"), (after or {}).get("sampled")
    if not b and not a:
        return None
    view = (lambda r: {"conditions": {"none": r}} if r else None)
    return {"samples": (a or b)["samples"], "success_before": b["success"] if b else None,
            "success_after": a["success"] if a else None, "score_before": b["score"] if b else None,
            "score_after": a["score"] if a else None,
            "difference": paired_difference(view(b), view(a)),
            "score_difference": paired_difference(view(b), view(a), field="scores")}


def panel_summary(before: dict | None, after: dict | None, config: RunConfig, n: int) -> dict[str, Any]:
    """The panel's after - before differences (success, and score for environments that report one)."""
    return {"split": config.panel, "tasks": n, "unseen": config.panel != config.train_split,
            **_differences(before, after)}


def training_summary(before: dict | None, after: dict | None, config: RunConfig, n: int) -> dict[str, Any] | None:
    if before is None and after is None:
        return None

    def rate(res: dict | None) -> float | None:
        return None if res is None else res["conditions"]["none"]["success"]

    return {"split": config.train_split, "tasks": n, "success_before": rate(before), "success_after": rate(after),
            **_differences(before, after)}


def run_summary(before: dict | None, after: dict | None, warm: dict | None, timings: dict[str, float]) -> dict:
    def pick(res: dict | None, mode: str) -> float | None:
        if not res or mode not in res.get("conditions", {}):
            return None
        return res["conditions"][mode]["success"]

    return {"success_before": pick(before, "none"), "success_after": pick(after, "none"),
            "success_after_with_global": pick(after, "learned"),
            "warm_start": {k: v for k, v in (warm or {}).items() if k != "settings"} or None,
            **{k: round(v, 1) for k, v in timings.items()}}


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.1f}%"


def interval_text(d: dict[str, float] | None) -> str:
    """``+12.5 points (95% CI +4.2 to +20.8)`` for a paired difference, ``n/a`` without one."""
    if not d:
        return "n/a"
    return (f"{100 * d['estimate']:+.1f} points (95% CI {100 * d['low']:+.1f} to {100 * d['high']:+.1f}, "
            f"{d['tasks']} tasks)")


def summary_line(s: dict[str, Any], scored: bool = False) -> str:
    p = s.get("panel") or {}
    where = f"{p.get('split', '?')}, {'games never trained on' if p.get('unseen') else 'the training split'}"
    score = f"; score after - before {_score_text(p.get('score_difference'))}" if scored else ""
    return (f"panel ({where}) success before RL {_pct(s['success_before'])}; "
            f"after RL {_pct(s['success_after'])} without Global, {_pct(s['success_after_with_global'])} with the "
            f"learned Global; after - before {interval_text(p.get('difference'))}{score}"
            f"{_sampled_text(p.get('sampled'), scored)}; total {s['time/total_s'] / 60:.1f} min")


def training_line(t: dict[str, Any], scored: bool = False) -> str:
    score = f"; score after - before {_score_text(t.get('score_difference'))}" if scored else ""
    return (f"training tasks ({t['split']}, {t['tasks']} of the games RL trained on) success before RL "
            f"{_pct(t['success_before'])}; after RL {_pct(t['success_after'])}; after - before "
            f"{interval_text(t['difference'])}{score}{_sampled_text(t.get('sampled'), scored)}")


def _sampled_text(d: dict[str, Any] | None, scored: bool = False) -> str:
    """``; sampled (4 per task) 61.7% -> 73.3%, +11.7 points (95% CI ...)`` or nothing."""
    if not d:
        return ""
    score = f", score {_score_text(d.get('score_difference'))}" if scored else ""
    return (f"; sampled policy ({d['samples']} episodes per task) {_pct(d['success_before'])} -> "
            f"{_pct(d['success_after'])}, {interval_text(d.get('difference'))}{score}")


def _score_text(d: dict[str, float] | None) -> str:
    """A score difference on the 0-100 scale the paper uses for WebShop."""
    if not d:
        return "n/a"
    return f"{100 * d['estimate']:+.1f} (95% CI {100 * d['low']:+.1f} to {100 * d['high']:+.1f})"
