"""Our own solvable ALFWorld games (all six task types) in the official data layout, for default and test data.

Each game is a random room (``rooms.Room``) with a goal from ALFWorld's goal library, ALFWorld's PDDL domain and
grammar (task sentence substituted as ``alfworld-generate`` does), solved by TextWorld's planner (Fast Downward)
for the ``walkthrough`` and replayed in the real engine before it is kept. Output:
``<out>/json_2.1.1/<split>/<task_type>-<Obj>-None-<Recep>-<scene>/trial_G<seed>_<n>/game.tw-pddl`` plus a stub
``traj_data.json``. Generation is deterministic per ``seed`` (files are byte-identical).
"""

from __future__ import annotations

import json
import os
import random
import shutil
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from skillduet_plugin.core.artefacts import building, code_digest, digest_key, read_marker
from skillduet_plugin.envs.alfworld.engine import EngineSession, import_engine
from skillduet_plugin.envs.alfworld.rooms import (APPLIANCE, DISTRACTORS, LAMP, LAMP_HOLDERS, RECEPTACLES, TARGETS,
                                                  Room, can_contain)
from skillduet_plugin.envs.alfworld.tasks import GAME_FILE, LAYOUT_DIR, LONG_TASK_TYPES, SCOPES

DEFAULT_N_PER_TYPE: dict[str, int] = {"train": 8, "valid_seen": 4, "valid_unseen": 4, "valid_train": 4}
MAX_ATTEMPTS = 50


def _sample_room(rng: random.Random, scope: str) -> tuple[Room, dict[str, str]] | None:
    """A room and its task parameters for ``scope``, or None when this draw cannot host the task."""
    obj = rng.choice(TARGETS[scope])
    appliance = APPLIANCE.get(scope)
    if scope == "look":
        recep, required = "", [rng.choice(LAMP_HOLDERS)]
    else:
        options = sorted(c for c in RECEPTACLES if can_contain(c, obj) and c != appliance)
        if not options:
            return None
        recep = rng.choice(options)
        required = [recep] + ([appliance] if appliance else [])
    others = sorted(c for c in RECEPTACLES if c not in required)
    classes = required + rng.sample(others, rng.randint(3, 5))
    room = Room(rng)
    for cls in classes:
        for _ in range(rng.randint(1, RECEPTACLES[cls][1])):
            room.add_receptacle(cls)

    # The target starts away from the goal: not in a goal-class receptacle, not next to the lamp.
    lamp_at = rng.choice([r for c in LAMP_HOLDERS for r in room.of_class(c)]) if scope == "look" else None
    holders = [r for r in room.holders(obj, exclude=(recep,)) if r != lamp_at]
    if not holders:
        return None
    for _ in range(2 if scope == "pick2" else rng.choice((1, 1, 2))):
        room.add_object(obj, rng.choice(holders))
    if lamp_at:
        room.add_object(LAMP, lamp_at)
    for cls in rng.sample([d for d in DISTRACTORS if d != obj], rng.randint(2, 5)):
        spots = room.holders(cls)
        if spots:
            room.add_object(cls, rng.choice(spots))
    params = {"object_target": obj, "parent_target": recep, "toggle_target": LAMP if scope == "look" else "",
              "mrecep_target": "", "object_sliced": False}
    return room, params


def _goal_and_grammar(scope: str, params: dict, seed_text: str) -> tuple[str, str, str]:
    """(goal PDDL, grammar with the task sentence, PDDL domain) from ALFWorld's own library files."""
    import_engine()
    from alfworld.agents.utils.misc import add_task_to_grammar  # lazy: alfworld
    from alfworld.gen import goal_library  # lazy: alfworld
    from alfworld.info import ALFRED_PDDL_PATH, ALFRED_TWL2_PATH  # lazy: alfworld

    long_type = LONG_TASK_TYPES[scope]
    goal = goal_library.gdict[long_type]["pddl"].format(
        obj=params["object_target"], recep=params["parent_target"], toggle=params["toggle_target"], mrecep="")
    goal = goal.replace("#", "-")  # the library escapes PDDL's type dash
    traj = {"task_type": long_type, "pddl_params": params}
    # alfworld picks the sentence template with the global `random`: seed it for this call only.
    state = random.getstate()
    random.seed(seed_text)
    try:
        grammar = add_task_to_grammar(Path(ALFRED_TWL2_PATH).read_text(), traj)
    finally:
        random.setstate(state)
    return goal, grammar, Path(ALFRED_PDDL_PATH).read_text()


def _solve_and_check(gamefile: Path, planner: EngineSession, player: EngineSession) -> list[str] | None:
    """The planner's command sequence if replaying it wins exactly at its last step, else None."""
    plan = list(planner.reset(str(gamefile), reload=True)["policy_commands"] or [])
    if not plan:
        return None
    player.reset(str(gamefile), reload=True)
    for i, command in enumerate(plan):
        state, _, _ = player.step(command)
        if state.feedback == "Nothing happens." or bool(state["won"]) != (i == len(plan) - 1):
            return None
    return plan


def generate_games(out_dir: str | os.PathLike, split: str = "train", n_per_type: int = 4, seed: int = 0, *,
                   max_walkthrough: int = 10, min_walkthrough: int = 4,
                   task_types: tuple[str, ...] = SCOPES) -> list[Path]:
    """Write ``n_per_type`` solvable games of each task type under ``<out_dir>/json_2.1.1/<split>``.

    Returns the game files in generation order. Every walkthrough has ``min_walkthrough..max_walkthrough``
    commands, so no policy can win in fewer than ``min_walkthrough`` steps.
    """
    if n_per_type < 1:
        raise ValueError(f"n_per_type={n_per_type} must be >= 1")
    if not 1 <= min_walkthrough <= max_walkthrough:
        raise ValueError(f"need 1 <= min_walkthrough ({min_walkthrough}) <= max_walkthrough ({max_walkthrough})")
    bad = [t for t in task_types if t not in SCOPES]
    if bad:
        raise ValueError(f"task_types={bad} unknown: use some of {', '.join(SCOPES)}")
    split_dir = Path(out_dir) / LAYOUT_DIR / split
    planner, player = EngineSession(policy_commands=True), EngineSession()
    files: list[Path] = []
    try:
        for scope in task_types:
            for k in range(n_per_type):
                files.append(_generate_one(split_dir, split, seed, scope, k, planner, player,
                                           (min_walkthrough, max_walkthrough)))
    finally:
        planner.close()
        player.close()
    return files


def _generate_one(split_dir: Path, split: str, seed: int, scope: str, k: int, planner: EngineSession,
                  player: EngineSession, length: tuple[int, int]) -> Path:
    for attempt in range(MAX_ATTEMPTS):
        seed_text = f"skillduet-alfworld/{split}/{seed}/{scope}/{k}/{attempt}"
        rng = random.Random(seed_text)
        sampled = _sample_room(rng, scope)
        if sampled is None:
            continue
        room, params = sampled
        goal, grammar, domain = _goal_and_grammar(scope, params, seed_text)
        trial = f"trial_G{seed:06d}_{SCOPES.index(scope)}{k:05d}"
        scene = 1000 + rng.randrange(1000)
        task_dir = (f"{LONG_TASK_TYPES[scope]}-{params['object_target']}-None-"
                    f"{params['parent_target'] or params['toggle_target']}-{scene}")
        game_dir = split_dir / task_dir / trial
        game_dir.mkdir(parents=True, exist_ok=True)
        game = {"pddl_domain": domain, "grammar": grammar, "pddl_problem": room.problem(f"plan_{trial}", goal),
                "solvable": False, "walkthrough": []}
        path = game_dir / GAME_FILE
        path.write_text(json.dumps(game))
        plan = _solve_and_check(path, planner, player)
        if plan is None or not length[0] <= len(plan) <= length[1]:
            shutil.rmtree(game_dir)
            if not any(game_dir.parent.iterdir()):
                game_dir.parent.rmdir()
            continue
        game.update(solvable=True, walkthrough=plan)
        path.write_text(json.dumps(game))
        (game_dir / "traj_data.json").write_text(json.dumps({"task_type": LONG_TASK_TYPES[scope],
                                                             "pddl_params": params}))
        return path
    raise RuntimeError(f"could not generate a solvable {scope} game (split={split}, seed={seed}, index={k}) "
                       f"in {MAX_ATTEMPTS} attempts; widen max_walkthrough")


def cache_root() -> Path:
    """``$SKILLDUET_CACHE`` or ``~/.cache/skillduet``."""
    return Path(os.environ.get("SKILLDUET_CACHE") or "~/.cache/skillduet").expanduser()


# The code that decides what a generated game is: part of the cache key, so an edit regenerates the games.
GENERATOR_CODE = ("skillduet_plugin.envs.alfworld.generator", "skillduet_plugin.envs.alfworld.rooms",
                  "skillduet_plugin.envs.alfworld.tasks")


def generator_identity() -> dict[str, str]:
    """The code and engine versions generated games depend on (with the split, count and seed, their key)."""

    versions = {}
    for package in ("textworld", "alfworld"):
        try:
            versions[package] = version(package)
        except PackageNotFoundError:
            versions[package] = "none"
    return {"code": code_digest(*GENERATOR_CODE), **versions}


def default_data_root(n_per_type: int | None = None, seed: int = 0) -> Path:
    """Where ``ensure_default_data`` keeps generated games: one folder per setting and generator version (so
    processes running different code never share, nor replace, each other's games)."""

    version = digest_key(generator_identity(), 12)
    if n_per_type is None and seed == 0:
        return cache_root() / f"alfworld_generated-{version}"
    return cache_root() / f"alfworld_generated_n{n_per_type or 'default'}_seed{seed}-{version}"


def ensure_default_data(split: str = "train", n_per_type: int | None = None, seed: int = 0) -> Path:
    """The data root (holding ``json_2.1.1/<split>``) of our generated games, generating them on first use.

    A split is generated into a temporary folder, verified (a complete marker listing every file's sha256),
    fsynced and renamed into place (``artefacts.building``): a generation killed midway is never used, and
    concurrent callers never see a half-written split.
    """

    root = default_data_root(n_per_type, seed)
    split_dir = root / LAYOUT_DIR / split
    n = n_per_type or DEFAULT_N_PER_TYPE.get(split, 4)
    key = {"artefact": "alfworld-games", "split": split, "n_per_type": n, "seed": seed, **generator_identity()}
    if read_marker(split_dir, key) is not None:
        return root
    with building(split_dir, key) as tmp:
        generate_games(tmp, split, n_per_type=n, seed=seed)
        produced = tmp / LAYOUT_DIR / split
        for child in produced.iterdir():  # the split's own contents become the artefact folder
            child.rename(tmp / child.name)
        shutil.rmtree(tmp / LAYOUT_DIR)
    return root
