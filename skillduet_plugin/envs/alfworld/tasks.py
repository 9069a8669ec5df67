"""ALFWorld task ids, task types (scopes) and game-file discovery in the official data layout.

A task id is a trial directory relative to ``<root>/json_2.1.1``, e.g.
``valid_unseen/look_at_obj_in_light-AlarmClock-None-DeskLamp-308/trial_T20190908_222917_366542``; its game is
``game.tw-pddl`` inside that directory. The task type is the directory name up to the first ``-``, so no
``traj_data.json`` is needed.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from skillduet_plugin.envs.alfworld.archives import PARTS_OF, TRAIN_PARTS, extracted_root, part_tasks

GAME_FILE = "game.tw-pddl"
LAYOUT_DIR = "json_2.1.1"
SPLITS = ("train", "valid_seen", "valid_unseen", "valid_train")

# ALFWorld's task-type directory prefix -> the short scope name used for skills and per-type metrics.
# Order = ALFWorld's task-type ids 1..6.
TASK_TYPES: dict[str, str] = {
    "pick_and_place_simple": "pick",
    "look_at_obj_in_light": "look",
    "pick_clean_then_place_in_recep": "clean",
    "pick_heat_then_place_in_recep": "heat",
    "pick_cool_then_place_in_recep": "cool",
    "pick_two_obj_and_place": "pick2",
}
SCOPES: tuple[str, ...] = tuple(TASK_TYPES.values())
LONG_TASK_TYPES: dict[str, str] = {short: long for long, short in TASK_TYPES.items()}


def task_type_of(task_id: str | os.PathLike) -> str:
    """The scope (``pick``, ``look``, ``clean``, ``heat``, ``cool``, ``pick2``) of a task id or game path."""
    parts = Path(task_id).parts
    for part in reversed(parts):
        prefix = part.split("-", 1)[0]
        if prefix in TASK_TYPES and "-" in part:
            return TASK_TYPES[prefix]
    raise ValueError(f"task_id={str(task_id)!r} has no ALFWorld task directory "
                     f"(<task_type>-<Obj>-<MRecep>-<Recep>-<scene>) with a known task type "
                     f"({', '.join(TASK_TYPES)})")


def resolve_layout_root(data_dir: str | os.PathLike) -> Path:
    """``<data_dir>/json_2.1.1`` (or ``data_dir`` itself when it already is that folder), or the extracted layout
    of the ``<split>.tar.xz`` archives in ``data_dir`` (``archives.extracted_root``)."""
    root = Path(data_dir).expanduser()
    if (root / LAYOUT_DIR).is_dir():
        return (root / LAYOUT_DIR).resolve()
    if root.name == LAYOUT_DIR and root.is_dir():
        return root.resolve()
    extracted = extracted_root(root) if root.is_dir() else None
    if extracted is not None:
        return (extracted / LAYOUT_DIR).resolve()
    raise FileNotFoundError(f"data_dir={str(data_dir)!r} holds no {LAYOUT_DIR}/ folder and no <split>.tar.xz archive: "
                            f"point it at the folder that contains {LAYOUT_DIR}/<split>/<task>/trial_*/{GAME_FILE} "
                            f"(ALFWORLD_DATA layout) or the release's split archives")


@functools.lru_cache(maxsize=32)
def _discover(layout_root: str, split: str) -> tuple[str, ...]:
    split_dir = Path(layout_root) / split
    return tuple(sorted(str(p.parent.relative_to(layout_root).as_posix())
                        for p in split_dir.glob(f"*/*/{GAME_FILE}")))


def discover_tasks(layout_root: str | os.PathLike, split: str) -> list[str]:
    """Sorted task ids of ``split`` under ``layout_root`` (``.../json_2.1.1``); cached per process. A part of the
    training split (``clone``, ``dev``, ``rl``: ``archives.TRAIN_PARTS``) is read from ``train`` where the layout has
    no folder of its name, in a stable shuffled order (``archives.part_tasks``)."""
    split_dir = Path(layout_root) / split
    if not split_dir.is_dir() and split in TRAIN_PARTS and (Path(layout_root) / PARTS_OF).is_dir():
        return part_tasks(discover_tasks(layout_root, PARTS_OF), split)
    if not split_dir.is_dir():
        have = sorted(p.name for p in Path(layout_root).iterdir() if p.is_dir())
        raise FileNotFoundError(f"split={split!r} not found under {layout_root}: available splits are "
                                f"{', '.join(have) or '(none)'}")
    tasks = list(_discover(str(layout_root), split))
    if not tasks:
        raise FileNotFoundError(f"split={split!r} under {layout_root} holds no */trial_*/{GAME_FILE} files")
    return tasks


def select_tasks(tasks: list[str], *, subset: list[str] | None = None, max_tasks: int | None = None,
                 task_types: list[str] | None = None) -> list[str]:
    """Filter the ordered task list by explicit ids, scopes and a count limit (order is kept)."""
    if subset is not None:
        known = set(tasks)
        unknown = [t for t in subset if t not in known]
        if unknown:
            raise KeyError(f"tasks= names {len(unknown)} unknown task ids, e.g. {unknown[0]!r}")
        tasks = list(subset)
    if task_types is not None:
        bad = [t for t in task_types if t not in SCOPES]
        if bad:
            raise ValueError(f"task_types={bad} unknown: use some of {', '.join(SCOPES)}")
        tasks = [t for t in tasks if task_type_of(t) in task_types]
    if max_tasks is not None:
        if max_tasks < 1:
            raise ValueError(f"max_tasks={max_tasks} must be >= 1 (or None for all)")
        tasks = tasks[:max_tasks]
    return tasks
