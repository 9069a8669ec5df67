"""The run directory (config, metrics, skill bank, checkpoints, plots, evaluations), the user cache, and model
resolution (``tiny`` specs are built offline into the cache)."""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from skillduet_plugin.config import ConfigError
from skillduet_plugin.core.artefacts import digest_key
from skillduet_plugin.runs.config import check_model_folder, tiny_size
from skillduet_plugin.warmstart.tiny_model import build_tiny, corpus_spec, tiny_key

BANK_FILE = "skill_bank.sqlite"
METRICS_FILE = "metrics.jsonl"
CONFIG_FILE = "config.yaml"


def cache_dir() -> Path:
    """``$SKILLDUET_CACHE`` or ``~/.cache/skillduet`` (tiny models, warm-start checkpoints, generated data)."""
    root = os.environ.get("SKILLDUET_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "skillduet")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def resolve_model(spec: str, *, seed: int = 0, env: str | None = None) -> Path:
    """A model folder for ``spec``: ``tiny`` / ``tiny:<size>`` are built once into the cache (for ``env``, with
    that environment's own tokenizer text where it registers one), anything else must be an existing local
    folder (nothing is downloaded). A tiny build's folder is named by its key, so builds of different code
    versions sharing one cache never replace each other."""
    if spec.startswith("tiny"):

        size = tiny_size(spec)
        corpus = env if corpus_spec(env) is not None else None
        key = digest_key(tiny_key(size, seed=seed, corpus=corpus), 12)
        name = f"tiny-{size}-s{seed}-{corpus}-{key}" if corpus else f"tiny-{size}-s{seed}-{key}"
        return build_tiny(cache_dir() / "models" / name, size=size, seed=seed, corpus=corpus)

    return check_model_folder(spec)


@dataclass
class RunDir:
    """Paths inside one run directory."""

    root: Path

    @property
    def config(self) -> Path:
        return self.root / CONFIG_FILE

    @property
    def metrics(self) -> Path:
        return self.root / METRICS_FILE

    @property
    def bank(self) -> Path:
        return self.root / BANK_FILE

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def final_model(self) -> Path:
        return self.root / "final_model"

    @property
    def plots(self) -> Path:
        return self.root / "plots"

    @property
    def eval_dir(self) -> Path:
        return self.root / "eval"

    @property
    def log(self) -> Path:
        return self.root / "train.log"

    @classmethod
    def create(cls, output_dir: str | None, name: str, runs_root: str | os.PathLike = "runs") -> "RunDir":
        """``output_dir`` (must not hold a finished run) or ``runs/<YYYYmmdd-HHMMSS>-<name>``."""
        if output_dir:
            root = Path(output_dir).expanduser()
            if (root / METRICS_FILE).exists():
                raise ConfigError(f"output_dir={output_dir!r} already holds a run ({METRICS_FILE} exists): "
                                  f"choose a new folder or delete it")
        else:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            root = Path(runs_root) / f"{stamp}-{name}"
            k = 1
            while root.exists():  # two runs started within the same second
                k += 1
                root = Path(runs_root) / f"{stamp}-{name}-{k}"
        root.mkdir(parents=True, exist_ok=True)
        return cls(root.resolve())

    @classmethod
    def open(cls, path: str | os.PathLike) -> "RunDir":
        root = Path(path).expanduser()
        if not (root / CONFIG_FILE).is_file():
            raise FileNotFoundError(f"{path} is not a run directory: it holds no {CONFIG_FILE}")
        return cls(root.resolve())


def _plain(value: Any) -> Any:
    """JSON-safe scalars: tensors/numpy to Python numbers, NaN/inf to None."""
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", 0) == 0:
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


class MetricsWriter:
    """Appends one JSON object per line to ``metrics.jsonl`` (flushed per line, so a crash keeps the history)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, record: Mapping[str, Any]) -> dict[str, Any]:
        plain = _plain(dict(record))
        with self.path.open("a") as f:
            f.write(json.dumps(plain, sort_keys=False) + "\n")
        return plain


def read_metrics(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl`` (a run directory or the file itself); a torn last line is skipped."""
    file = Path(path)
    if file.is_dir():
        file = file / METRICS_FILE
    records = []
    for line in file.read_text().splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def write_json(path: str | os.PathLike, data: Any) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(_plain(data), indent=2) + "\n")
    return out


def step_records(records: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Only the per-step training records (those with a ``step`` and no ``event``)."""
    return [r for r in records if "step" in r and "event" not in r]
