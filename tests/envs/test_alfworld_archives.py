"""The real ALFWorld archives as a data folder: extracted once into the cache (never next to the archives), the
training split cut into disjoint parts, the engine's memoised command texts equal to TextWorld's own, and a
``skillduet train`` run from ``data_dir=`` on a few real games."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from skillduet_plugin.envs.alfworld.archives import TRAIN_PARTS, archives_in, in_part, part_bucket

SHARED = Path(os.environ.get("SKILLDUET_SHARED_DATA") or Path(__file__).resolve().parents[2].parent / "shared" / "data")
ARCHIVES = SHARED / "alfworld"
needs_archives = pytest.mark.skipif(not (ARCHIVES / "valid_unseen.tar.xz").is_file(),
                                    reason=f"the ALFWorld archives are not at {ARCHIVES}")


def test_parts_are_a_disjoint_cover_of_ten_buckets():
    buckets = sorted(b for part in TRAIN_PARTS.values() for b in part)
    assert buckets == list(range(10))
    # stable on every machine and in every process (no salted hash()): the values are pinned, so a change of the
    # hash silently moving games between the parts fails here
    assert part_bucket("pick_and_place_simple-Apple-None-Fridge-1") == 1
    assert part_bucket("look_at_obj_in_light-CD-None-DeskLamp-308") == 8
    assert part_bucket("pick_heat_then_place_in_recep-Egg-None-Fridge-13") == 9
    task = "train/pick_and_place_simple-Apple-None-Fridge-1/trial_T1"
    assert sum(in_part(task, p) for p in TRAIN_PARTS) == 1
    # the trials of one configuration stay together
    assert {p for p in TRAIN_PARTS if in_part(task.replace("T1", "T2"), p)} == \
        {p for p in TRAIN_PARTS if in_part(task, p)}


@needs_archives
def test_archives_extract_into_the_cache_and_parts_split_train(tmp_path, monkeypatch):
    monkeypatch.setenv("SKILLDUET_CACHE", str(tmp_path / "cache"))
    source = tmp_path / "archives"  # two small splits of the real release: valid_unseen as "train" too
    source.mkdir()
    shutil.copy(ARCHIVES / "valid_unseen.tar.xz", source / "valid_unseen.tar.xz")
    assert sorted(archives_in(source)) == ["valid_unseen"]
    from skillduet_plugin import envs
    from skillduet_plugin.envs.alfworld import tasks as alf_tasks

    env = envs.make("alfworld", data_dir=str(source), split="valid_unseen")
    assert len(env.tasks) == 134
    root = alf_tasks.resolve_layout_root(source)
    assert str(root).startswith(str(tmp_path / "cache")) and list(source.iterdir()) == [source / "valid_unseen.tar.xz"]
    marker = json.loads((root / "valid_unseen" / "skillduet_artefact.json").read_text())
    assert marker["key"]["artefact"] == "alfworld-archive"
    # parts are read from "train": a layout whose train is valid_unseen's games (a link, for the test)
    layout = tmp_path / "layout" / "json_2.1.1"
    layout.mkdir(parents=True)
    (layout / "train").symlink_to(root / "valid_unseen")
    alf_tasks._discover.cache_clear()
    everything = alf_tasks.discover_tasks(layout, "train")
    parts = {p: alf_tasks.discover_tasks(layout, p) for p in TRAIN_PARTS}
    assert sorted(t for ts in parts.values() for t in ts) == sorted(everything)
    assert all(set(parts[a]).isdisjoint(parts[b]) for a in parts for b in parts if a < b)
    assert all(ts == alf_tasks.discover_tasks(layout, p) for p, ts in parts.items())  # a stable order
    assert parts["clone"] != sorted(parts["clone"])  # shuffled by a hash, not alphabetical
    dirs = {p: {Path(t).parts[-2] for t in ts} for p, ts in parts.items()}
    assert all(dirs[a].isdisjoint(dirs[b]) for a in dirs for b in dirs if a < b)  # no configuration shared


@needs_archives
def test_memoised_command_texts_equal_textworlds(tmp_path, monkeypatch):
    """Random walks on real rooms: every observation and admissible list with the command-text memo equals the
    engine without it (the memo is keyed by template and binding only)."""
    monkeypatch.setenv("SKILLDUET_CACHE", str(tmp_path / "cache"))
    from skillduet_plugin import envs
    from skillduet_plugin.envs.alfworld import engine

    def walk(env, seed):
        rng, out = random.Random(seed), []
        for task in env.tasks[:4]:
            obs, info = env.reset(task)
            out.append((obs, tuple(info["admissible_actions"])))
            for _ in range(12):
                obs, _, done, info = env.step(rng.choice(info["admissible_actions"]))
                out.append((obs, tuple(info["admissible_actions"]), done))
                if done:
                    break
        return out

    with envs.make("alfworld", data_dir=str(ARCHIVES), split="valid_unseen", task_types=["heat", "look"]) as env:
        memoised = walk(env, 0)
    engine._LOGIC_CACHE.clear()
    monkeypatch.setattr(engine, "_memoise_commands", lambda logic: logic)
    with envs.make("alfworld", data_dir=str(ARCHIVES), split="valid_unseen", task_types=["heat", "look"]) as env:
        plain = walk(env, 0)
    engine._LOGIC_CACHE.clear()
    assert memoised == plain and len(plain) > 20


@needs_archives
def test_memoised_command_texts_follow_each_games_names(tmp_path, monkeypatch):
    """Three trials of one scene share the grammar, the logic and the objects' ids but number the objects
    differently (``mug 1`` / ``mug 3``): played one after another in one process, each walkthrough wins and every
    admissible list equals the engine without the memo. A memo keyed by template and binding alone (shared by
    the games) gives the second trial the first one's names: its walkthrough's ``take mug 3`` is not admissible."""
    monkeypatch.setenv("SKILLDUET_CACHE", str(tmp_path / "cache"))
    from skillduet_plugin import envs
    from skillduet_plugin.envs.alfworld import engine

    def play(env):
        tasks = [t for t in env.tasks if "pick_clean_then_place_in_recep-Mug-None-CoffeeMachine-10" in t]
        out = []
        for task in tasks:
            obs, info = env.reset(task)
            lists, done = [tuple(info["admissible_actions"])], False
            for action in env.walkthrough(task):
                assert action in info["admissible_actions"], (task, action)
                obs, _, done, info = env.step(action)
                lists.append(tuple(info["admissible_actions"]))
            out.append((task, done, lists))
        return out

    engine._LOGIC_CACHE.clear()
    with envs.make("alfworld", data_dir=str(ARCHIVES), split="valid_unseen", task_types=["clean"]) as env:
        memoised = play(env)
    engine._LOGIC_CACHE.clear()
    monkeypatch.setattr(engine, "_memoise_commands", lambda logic: logic)
    with envs.make("alfworld", data_dir=str(ARCHIVES), split="valid_unseen", task_types=["clean"]) as env:
        plain = play(env)
    engine._LOGIC_CACHE.clear()
    assert len(memoised) == 3 and all(done for _, done, _ in memoised)
    assert memoised == plain


@needs_archives
@pytest.mark.slow
def test_train_from_the_archives_on_a_few_real_games(tmp_path):
    """`skillduet train data_dir=<the archives>`: RL games from the `rl` part, the panel from valid_unseen."""
    out = tmp_path / "run"
    env = {**os.environ, "SKILLDUET_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "skillduet_plugin.cli", "train", f"data_dir={ARCHIVES}", "train_split=rl",
           "task_types=pick,heat", "train_tasks=2", "tasks_per_step=1", "num_generations=2", "steps=1",
           "eval_tasks=2", "eval_training_tasks=1", "eval_samples=0", "eval_teacher=false",
           "teacher_check_samples=0", "max_turns=3", "max_total_tokens=3072", "warm_start.enabled=false",
           "skillduet.opd_estimator=choices", "opd_update_share=false", "--output-dir", str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["training_tasks"]["split"] == "rl" and summary["training_tasks"]["tasks"] == 1
    assert summary["panel"]["split"] == "valid_unseen" and summary["panel"]["tasks"] == 2
    played = [json.loads(line) for line in (out / "trajectories" / "step_000001.jsonl").read_text().splitlines()]
    assert len(played) == 2 and all(in_part(t["task_id"], "rl") for t in played)
    assert {t["scope"] for t in played} <= {"pick", "heat"}
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert any(r.get("step") == 1 and "env/won" in r for r in records)
    assert not list(ARCHIVES.glob("json_2.1.1"))  # nothing extracted next to the archives
