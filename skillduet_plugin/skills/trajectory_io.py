"""Trajectories on disk as JSON Lines (one ``Trajectory.to_dict()`` per line), for ``skillduet score``.

Adapters that want offline re-scoring write each step's trajectories to
``RUN_DIR/trajectories/step_<NNNNNN>.jsonl`` with :func:`save_trajectories`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable, Sequence

from skillduet_plugin.core.artefacts import replace_file
from skillduet_plugin.skills.sanitize import clean_strings
from skillduet_plugin.skills.types import Trajectory

TRAJECTORY_DIRNAME = "trajectories"


def trajectory_file(run_dir: str | os.PathLike, step: int) -> Path:
    return Path(run_dir) / TRAJECTORY_DIRNAME / f"step_{int(step):06d}.jsonl"


def save_trajectories(path: str | os.PathLike, trajectories: Iterable[Trajectory]) -> Path:
    """Write ``trajectories`` to ``path`` atomically (``core.artefacts.replace_file``)."""
    def write(tmp: Path) -> None:
        with open(tmp, "w", encoding="utf-8") as fh:
            for t in trajectories:
                fh.write(json.dumps(t.to_dict(), default=str) + "\n")

    return replace_file(path, write)


def load_trajectories(paths: Sequence[str | os.PathLike]) -> list[Trajectory]:
    """Trajectories from JSONL files or folders of ``*.jsonl`` files, in file then line order."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files.extend(sorted(p.glob("*.jsonl")))
        elif p.is_file():
            files.append(p)
        else:
            raise FileNotFoundError(f"no trajectory file or folder at {p}")
    out = []
    for f in files:
        # A user file: invalid bytes and JSON-escaped surrogates or control characters must not reach a prompt.
        for n, line in enumerate(f.read_bytes().decode("utf-8", errors="replace").splitlines(), 1):
            if line.strip():
                try:
                    out.append(Trajectory.from_dict(clean_strings(json.loads(line))))
                except (TypeError, ValueError) as exc:
                    raise ValueError(f"{f}:{n}: not a Trajectory record ({exc})") from exc
    return out
