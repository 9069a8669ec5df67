"""An environment registered with its factory alone (``register_env("beacons", make_beacons)``, nothing else), in
a package installed by pip, trains through the ``skillduet`` command: the entry point registers it, its prompts
are the standard verl-agent prompt with a neutral role, and its episodes are played and scored by it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from skillduet_plugin.envs.prompts import NEUTRAL_ROLE

PACKAGE = Path(__file__).with_name("minimal_env_package")
REPO = Path(__file__).resolve().parents[2]
ACTION = re.compile(r"<action>(.*?)</action>")


def _install(tmp_path: Path) -> Path:
    """``pip install --target`` of a copy of the package folder (the build writes next to its sources)."""
    src, site = tmp_path / "src", tmp_path / "site"
    shutil.copytree(PACKAGE, src)
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                           "--no-build-isolation", "--target", str(site), str(src)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (site / "beacons_env.py").is_file()
    return site


def _skillduet(args: list[str], pythonpath: list[Path], cache: Path) -> subprocess.CompletedProcess:
    script = Path(sys.executable).with_name("skillduet")
    command = [str(script)] if script.is_file() else [sys.executable, "-m", "skillduet_plugin.cli"]
    path = os.pathsep.join([*map(str, pythonpath), str(REPO)])
    env = dict(os.environ, PYTHONPATH=path, SKILLDUET_CACHE=str(cache), OMP_NUM_THREADS="1")
    return subprocess.run(command + args, capture_output=True, text=True, env=env, cwd=cache.parent)


@pytest.mark.slow
def test_an_installed_env_registered_with_its_factory_alone_trains_from_the_cli(tmp_path, tiny_model_dir):
    site, run = _install(tmp_path), tmp_path / "run"
    args = ["train", "env=beacons", f"model={tiny_model_dir}", "steps=1", "tasks_per_step=2", "num_generations=2",
            "train_tasks=2", "eval_tasks=3", "eval_training_tasks=0", "eval_samples=0", "eval_before=false",
            "max_turns=2", "action_selection=choose", "warm_start.enabled=false", "save_steps=0", "threads=1",
            "--output-dir", str(run)]
    # negative control: without the installed package no environment of that name exists, before any work
    missing = _skillduet(args, [], tmp_path / "cache")
    assert missing.returncode == 2 and "env='beacons' is invalid" in missing.stderr, missing.stderr[-2000:]
    assert not run.exists()

    done = _skillduet(args, [site], tmp_path / "cache")
    assert done.returncode == 0, done.stderr[-3000:]
    trajectories = [json.loads(line) for line in (run / "trajectories" / "step_000001.jsonl").read_text().splitlines()]
    assert len(trajectories) == 4  # 2 tasks x 2 rollouts
    assert {t["task_id"] for t in trajectories} == {"beacon-red", "beacon-blue"}  # the env's first 2 tasks
    for t in trajectories:
        colour = t["task_id"].split("-")[1]
        user = t["prompt_messages"][-1]["content"].split("\n")
        assert user[:3] == [NEUTRAL_ROLE, f"Your task is to: light the {colour} beacon.",
                            "You are now at step 1 and your current observation is: "
                            "Three beacons stand dark on the hill."]
        # scored by the env's own rule, recomputed here from the actions the policy took
        actions = [ACTION.search(r).group(1) for r in t["responses"]]
        won = actions[-1] == f"light {colour}"
        assert (t["success"], t["reward"]) == (won, float(won)), t
        assert len(actions) == (1 if actions[0] == f"light {colour}" else 2)  # a wrong beacon costs a turn
        if len(actions) == 2:
            assert "That beacon stays dark." in t["messages"][2]["content"]
    step = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    assert step["step"] == 1
    assert step["success/beacons"] == step["env/won"] == sum(t["success"] for t in trajectories) / 4
    summary = json.loads((run / "summary.json").read_text())
    assert summary["panel"]["split"] == "test" and summary["panel"]["tasks"] == 3  # the env's default panel
    assert summary["success_after"] in {0.0, 1 / 3, 2 / 3, 1.0}
