"""The ALFWorld game generator: six task types, solvable, won by their walkthrough, deterministic per seed."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from skillduet_plugin.envs import make
from skillduet_plugin.envs.alfworld import generator
from skillduet_plugin.envs.alfworld.tasks import LONG_TASK_TYPES, SCOPES

pytest.importorskip("alfworld")

# The task sentences ALFWorld's goal library allows per type (object/receptacle filled in).
SENTENCE_STARTS = {
    "pick": ("put a ", "put some "), "look": ("look at ", "examine the "),
    "clean": ("put a clean ", "clean some "), "heat": ("put a hot ", "heat some "),
    "cool": ("put a cool ", "cool some "), "pick2": ("put two ", "find two "),
}


@pytest.fixture(scope="module")
def gen_env(alfworld_generated):
    env = make("alfworld", data_dir=alfworld_generated, split="train")
    yield env
    env.close()


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_layout_and_files(alfworld_generated, gen_env):
    assert len(gen_env.tasks) == 12
    assert Counter(gen_env.task_type(t) for t in gen_env.tasks) == {s: 2 for s in SCOPES}
    for task in gen_env.tasks:
        split, task_dir, trial = task.split("/")
        scope = gen_env.task_type(task)
        long_type, obj, mrecep, recep, scene = task_dir.split("-")
        assert split == "train" and long_type == LONG_TASK_TYPES[scope] and mrecep == "None" and scene.isdigit()
        assert trial.startswith("trial_G000000_")
        game = json.loads(gen_env.game_file(task).read_text())
        assert set(game) == {"pddl_domain", "grammar", "pddl_problem", "solvable", "walkthrough"}
        assert game["solvable"] is True and 4 <= len(game["walkthrough"]) <= 10
        assert "UNKNOWN GOAL" not in game["grammar"]
        assert f"(objectType ?o {obj}Type)" in game["pddl_problem"] or f"?o1 {obj}Type" in game["pddl_problem"]
        traj = json.loads((gen_env.game_file(task).parent / "traj_data.json").read_text())
        assert traj["task_type"] == long_type and traj["pddl_params"]["object_target"] == obj
        assert recep == ("DeskLamp" if scope == "look" else traj["pddl_params"]["parent_target"])


def test_every_walkthrough_wins_at_its_last_step(gen_env):
    for task in gen_env.tasks:
        scope = gen_env.task_type(task)
        obs, info = gen_env.reset(task)
        assert obs.startswith("-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room.")
        assert info["task"].startswith(SENTENCE_STARTS[scope]), info["task"]
        plan = gen_env.walkthrough(task)
        for i, command in enumerate(plan):
            assert command in info["admissible_actions"], (task, command)
            obs, reward, done, info = gen_env.step(command)
            assert (done, info["won"], reward) == ((True, True, 1.0) if i == len(plan) - 1 else (False, False, 0.0))
        if scope in ("clean", "heat", "cool"):
            verb = {"clean": "clean", "heat": "heat", "cool": "cool"}[scope]
            assert any(c.startswith(verb + " ") for c in plan)
        if scope == "look":
            assert plan[-1].startswith("use desklamp")


def test_random_admissible_policy_does_not_win_in_three_steps(gen_env):
    rng = random.Random(0)
    for task in gen_env.tasks:
        for _ in range(3):
            _, info = gen_env.reset(task)
            for _ in range(3):
                _, reward, done, info = gen_env.step(rng.choice(info["admissible_actions"]))
                assert not info["won"] and reward == 0.0 and not done


def test_generation_is_deterministic_per_seed(tmp_path):
    a = generator.generate_games(tmp_path / "a", "valid_seen", n_per_type=1, seed=7, task_types=("heat", "look"))
    b = generator.generate_games(tmp_path / "b", "valid_seen", n_per_type=1, seed=7, task_types=("heat", "look"))
    generator.generate_games(tmp_path / "c", "valid_seen", n_per_type=1, seed=8, task_types=("heat", "look"))
    assert [p.relative_to(tmp_path / "a") for p in a] == [p.relative_to(tmp_path / "b") for p in b]
    assert _tree(tmp_path / "a") == _tree(tmp_path / "b")
    assert _tree(tmp_path / "a") != _tree(tmp_path / "c")


def test_ensure_default_data_generates_once_into_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SKILLDUET_CACHE", str(tmp_path))
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    monkeypatch.setitem(generator.DEFAULT_N_PER_TYPE, "valid_seen", 1)
    env = make("alfworld", split="valid_seen")  # no data_dir, no ALFWORLD_DATA: generated default data
    root = generator.default_data_root()
    assert root.parent == tmp_path and root.name.startswith("alfworld_generated-")
    assert env.layout_root == (root / "json_2.1.1").resolve() and len(env.tasks) == 6
    assert (root / "json_2.1.1" / "valid_seen" / "skillduet_artefact.json").is_file()
    assert not [p for p in (root / "json_2.1.1").iterdir() if p.name.startswith(".tmp")]
    before = _tree(root)
    assert generator.ensure_default_data("valid_seen") == root and _tree(root) == before  # not regenerated
    other = generator.ensure_default_data("valid_seen", n_per_type=1, seed=3)
    assert other.parent == tmp_path and other.name.startswith("alfworld_generated_n1_seed3-")


def test_bad_generator_arguments(tmp_path):
    with pytest.raises(ValueError, match="n_per_type"):
        generator.generate_games(tmp_path, n_per_type=0)
    with pytest.raises(ValueError, match="task_types"):
        generator.generate_games(tmp_path, task_types=("fly",))
    with pytest.raises(ValueError, match="min_walkthrough"):
        generator.generate_games(tmp_path, min_walkthrough=5, max_walkthrough=4)
