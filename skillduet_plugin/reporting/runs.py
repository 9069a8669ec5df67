"""What a report reads from a run directory: its label, config, per-step metrics, evaluations and skill bank.

Metric names differ slightly between producers (the TRL adapter logs ``env/won`` and ``skills/global_tokens``,
the run loop writes ``success`` and ``global/tokens``); :func:`normalise_records` gives each record the names
the plots read, without overwriting any that are present.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from skillduet_plugin.runs.rundir import BANK_FILE, CONFIG_FILE, METRICS_FILE, read_metrics, step_records

# plot name <- names other producers use for the same per-step number (first present wins)
ALIASES: dict[str, tuple[str, ...]] = {
    "success": ("env/won", "rollout/success"),
    "global/items": ("skills/global_items",),
    "global/tokens": ("skills/global_tokens",),
    # per-step analyzer failures; ``skills/analyzer_failures`` may be cumulative, so it comes last
    "analyzer/failures": ("skills/step_analyzer_failures", "skills/analyzer_failures"),
    "analyzer/requests": ("skills/step_analyzer_requests",),
    "synthesizer/failures": ("skills/synthesizer_failures",),
}


def normalise_records(records: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Copies of ``records`` with the plot names of :data:`ALIASES` filled in from the other producers' names."""
    out = []
    for r in records:
        rec = dict(r)
        for name, sources in ALIASES.items():
            if name in rec:
                continue
            for src in sources:
                value = rec.get(src)
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    rec[name] = value
                    break
        out.append(rec)
    return out


@dataclass
class RunData:
    """One run directory, loaded.

    Attributes:
        root: the run directory.
        label: how the run is named in the report (``<name> (<method>)`` from its config, else the folder name).
        config: the resolved ``config.yaml`` (empty if unreadable).
        records: every metrics record, normalised.
        steps: only the per-step training records.
        evaluations: ``name -> dict`` of each JSON file under ``eval/`` (and records with an ``event`` of eval).
    """

    root: Path
    label: str
    config: dict[str, Any] = field(default_factory=dict)
    records: list[dict[str, Any]] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    evaluations: dict[str, Any] = field(default_factory=dict)

    @property
    def bank(self) -> Path:
        return self.root / BANK_FILE

    @property
    def method(self) -> str:
        sd = self.config.get("skillduet")
        return str(sd.get("method", "")) if isinstance(sd, Mapping) else ""


def _read_config(root: Path) -> dict[str, Any]:
    path = root / CONFIG_FILE
    if not path.is_file():
        return {}
    try:

        data = yaml.safe_load(path.read_text())
    except Exception:  # a broken config must not stop a report of the metrics
        return {}
    return data if isinstance(data, dict) else {}


def _read_evaluations(root: Path, records: list[dict[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    eval_dir = root / "eval"
    if eval_dir.is_dir():
        for file in sorted(eval_dir.glob("*.json")):
            try:
                found[file.stem] = json.loads(file.read_text())
            except (OSError, json.JSONDecodeError):
                continue
    for r in records:
        event = str(r.get("event", ""))
        if event.startswith("eval") or event == "summary":
            key = event if "step" not in r else f"{event}@{r['step']}"
            found.setdefault(key, {k: v for k, v in r.items() if k != "event"})
    return found


def load_run(path: str | os.PathLike, label: str | None = None) -> RunData:
    """Load a run directory; it needs a ``metrics.jsonl`` (``config.yaml`` and the bank are optional)."""
    root = Path(path).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"RUN_DIR {path} does not exist: pass a run directory made by `skillduet train`")
    if not (root / METRICS_FILE).is_file():
        raise FileNotFoundError(f"RUN_DIR {path} holds no {METRICS_FILE}: pass a run directory made by "
                                f"`skillduet train` (it writes one record per step)")
    config = _read_config(root)
    records = normalise_records(read_metrics(root))
    if label is None:
        name = config.get("name") or root.name
        method = config.get("skillduet", {}).get("method") if isinstance(config.get("skillduet"), Mapping) else None
        label = f"{name} ({method})" if method and method not in str(name) else str(name)
    return RunData(root=root.resolve(), label=label, config=config, records=records,
                   steps=[dict(r) for r in step_records(records)], evaluations=_read_evaluations(root, records))


def unique_labels(runs: list[RunData]) -> list[str]:
    """The runs' labels, made distinct (``label``, ``label #2`` ...) so legends and headings are unambiguous."""
    seen: dict[str, int] = {}
    out = []
    for run in runs:
        n = seen.get(run.label, 0) + 1
        seen[run.label] = n
        out.append(run.label if n == 1 else f"{run.label} #{n}")
    return out
