"""ALFWorld data straight from the official archives, and the disjoint parts of the training split.

``data_dir`` may be a folder of the release's split archives (``train.tar.xz``, ``valid_unseen.tar.xz``, ... each
holding ``json_2.1.1/<split>/<task>/trial_*/game.tw-pddl``). Each archive is extracted once into
``$SKILLDUET_CACHE/alfworld-archives/<digest>/json_2.1.1/<split>`` (complete or absent, ``core.artefacts``), never
next to the archives, and that folder is the layout root the environment reads.

The training split is cut into three disjoint parts by the scene configuration of each game (its task directory:
task type, object, receptacles, scene; the trials of one configuration stay together), so that games cloned by the
warm start, games used to choose settings and the games a final run trains on never share a configuration:
``clone`` (6 in 10), ``dev`` (2 in 10) and ``rl`` (2 in 10). They are read from ``train`` wherever the layout has no
folder of that name, in an order shuffled by a hash of the task id (the first games of a type then spread over objects
and scenes).
"""

from __future__ import annotations

import functools
import hashlib
import os
import tarfile
from pathlib import Path

from skillduet_plugin.core.artefacts import building, digest_key, read_marker

ARCHIVE_SUFFIX = ".tar.xz"
#: derived split -> the buckets (of 10, by a hash of the task directory) of ``train`` it keeps
TRAIN_PARTS: dict[str, tuple[int, ...]] = {"clone": (0, 1, 2, 3, 4, 5), "dev": (6, 7), "rl": (8, 9)}
PARTS_OF = "train"


def part_bucket(task_dir: str) -> int:
    """The bucket (0-9) of a task directory name: a stable hash, the same on every machine."""
    return int(hashlib.sha256(task_dir.encode("utf-8")).hexdigest()[:8], 16) % 10


def in_part(task_id: str, part: str) -> bool:
    """Whether a ``train`` task id (``train/<task dir>/trial_*``) belongs to the derived split ``part``."""
    return part_bucket(Path(task_id).parts[-2]) in TRAIN_PARTS[part]


def part_tasks(train_tasks: list[str], part: str) -> list[str]:
    """The task ids of ``train`` in the derived split ``part``, ordered by a hash of the id: stable on every machine,
    and the first games of each task type (what a run takes, round-robin) spread over objects and scenes instead of
    the alphabet's first objects."""
    kept = [t for t in train_tasks if in_part(t, part)]
    return sorted(kept, key=lambda t: hashlib.sha256(t.encode("utf-8")).hexdigest())


def archives_in(folder: str | os.PathLike) -> dict[str, Path]:
    """Split name -> archive path of the ``<split>.tar.xz`` files directly in ``folder``."""
    found = {}
    for path in sorted(Path(folder).expanduser().glob(f"*{ARCHIVE_SUFFIX}")):
        found[path.name[: -len(ARCHIVE_SUFFIX)]] = path
    return found


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _cache_root() -> Path:
    return Path(os.environ.get("SKILLDUET_CACHE") or "~/.cache/skillduet").expanduser() / "alfworld-archives"


@functools.lru_cache(maxsize=8)
def _extracted(folder: str, stamp: tuple) -> Path:
    archives = archives_in(folder)
    shas = {split: _sha256(path) for split, path in archives.items()}
    root = _cache_root() / digest_key(shas)
    for split, path in archives.items():
        final = root / "json_2.1.1" / split
        key = {"artefact": "alfworld-archive", "split": split, "sha256": shas[split]}
        if read_marker(final, key) is not None:
            continue
        with building(final, key) as tmp:
            _extract_split(path, split, tmp)
    return root


def _extract_split(archive: Path, split: str, into: Path) -> None:
    """The members under ``json_2.1.1/<split>/`` of ``archive``, written below ``into`` without that prefix."""
    prefix = f"json_2.1.1/{split}/"
    with tarfile.open(archive, "r:xz") as tar:
        for member in tar.getmembers():
            name = member.name.lstrip("./")
            if not member.isfile() or not name.startswith(prefix):
                continue
            rel = Path(name[len(prefix):])
            if rel.is_absolute() or ".." in rel.parts:
                raise ValueError(f"{archive}: member {member.name!r} leaves the split folder")
            target = into / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            assert source is not None  # a regular file
            target.write_bytes(source.read())


def extracted_root(folder: str | os.PathLike) -> Path | None:
    """The data root (holding ``json_2.1.1/``) of the archives in ``folder``, extracted on first use; None when
    ``folder`` holds no ``<split>.tar.xz``."""
    archives = archives_in(folder)
    if not archives:
        return None
    stamp = tuple((name, p.stat().st_size, p.stat().st_mtime_ns) for name, p in archives.items())
    return _extracted(str(Path(folder).expanduser().resolve()), stamp)


__all__ = ["PARTS_OF", "TRAIN_PARTS", "archives_in", "extracted_root", "in_part", "part_bucket", "part_tasks"]
