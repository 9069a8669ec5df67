"""The same config and seed give the same numbers on an idle or a busy machine: ``skillduet train`` runs twice
in fresh processes (different hash seeds, separate caches, so the warm start is cloned twice), the second beside
a CPU-burning process and after a warm start of the same settings was SIGKILLed mid-cloning in its cache; every
metric, rollout, panel result and the final weights must be equal, bit for bit, timings aside."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytest.importorskip("alfworld")

from skillduet_plugin.runs.config import RunConfig  # noqa: E402
from skillduet_plugin.runs.trl_runner import torch_threads  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TIMING = re.compile(r"(^time/|_time$|runtime|per_second|seconds|_s$)")


@pytest.fixture(scope="module")
def setting(tmp_path_factory):
    from skillduet_plugin.envs.alfworld.generator import generate_games
    from skillduet_plugin.warmstart.tiny_model import build_tiny

    root = tmp_path_factory.mktemp("determinism")
    games = root / "games"
    generate_games(games, "train", n_per_type=2, seed=1, task_types=("pick", "look"), max_walkthrough=6)
    generate_games(games, "valid_unseen", n_per_type=1, seed=2, task_types=("pick", "look"), max_walkthrough=6)
    return root, games, build_tiny(root / "tiny")


def _args(games: Path, model: Path, out: Path) -> list[str]:
    # the tiny model as a folder, so that both runs share it while each clones its own warm start
    return ["train", f"data_dir={games}", f"model={model}", "warm_start.enabled=true", "action_selection=choose",
            "steps=2", "tasks_per_step=2", "num_generations=2", "max_turns=3", "eval_tasks=2", "warm_start.games=2",
            "warm_start.steps=6", "skillduet.consolidation_interval=1", "save_steps=0", "--output-dir", str(out)]


def _train(args: list[str], cache: Path, hash_seed: int) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO), "SKILLDUET_CACHE": str(cache), "PYTHONHASHSEED": str(hash_seed)}
    done = subprocess.run([sys.executable, "-m", "skillduet_plugin.cli", *args], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


def _threads(log: str) -> int:
    """The torch thread count a run reports in its run-directory line."""
    [count] = re.findall(r"\((\d+) torch threads?, ", log)
    return int(count)


def _untimed(value):
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if not TIMING.search(k)}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value


def _numbers(run: Path) -> dict:
    """Everything a run measured, timings aside: metrics, rollouts, panel results, final weights."""
    out = {"metrics": [_untimed(json.loads(line)) for line in (run / "metrics.jsonl").read_text().splitlines()]}
    for sub in ("eval", "trajectories"):
        for f in sorted((run / sub).iterdir()):
            lines = f.read_text().splitlines() if f.suffix == ".jsonl" else [f.read_text()]
            out[f"{sub}/{f.name}"] = [_untimed(json.loads(line)) for line in lines]
    out["weights"] = hashlib.sha256((run / "final_model" / "model.safetensors").read_bytes()).hexdigest()
    return out


@pytest.mark.slow
def test_a_run_beside_a_busy_process_gives_the_same_numbers(setting, tmp_path):
    root, games, model = setting
    idle = tmp_path / "idle"
    log_idle = _train(_args(games, model, idle), tmp_path / "cache_idle", hash_seed=1)

    busy_cache = tmp_path / "cache_busy"
    killed = subprocess.Popen([sys.executable, "-m", "skillduet_plugin.cli", *_args(games, model, tmp_path / "x"),
                               "warm_start.steps=100000"], stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(REPO), "SKILLDUET_CACHE": str(busy_cache)})
    cloning = False
    for line in killed.stderr:  # SIGKILL it once cloning is under way (its time estimate comes after 5 steps)
        if "cloning steps, about" in line:
            cloning = True
            break
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    # the precondition: the warm start was cloning when the kill came (a child that ended first tests nothing)
    assert cloning and killed.returncode == -signal.SIGKILL, killed.returncode

    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        busy = tmp_path / "busy"
        log_busy = _train(_args(games, model, busy), busy_cache, hash_seed=2)
    finally:
        burner.kill()
        burner.wait()

    assert "warm start: reusing" not in log_busy  # the killed warm start was not taken for a finished one
    # both runs use the thread count the machine gives (one per two cores on CPU), not one the load gives
    assert _threads(log_idle) == _threads(log_busy) == torch_threads(RunConfig())
    a, b = _numbers(idle), _numbers(busy)
    assert a.keys() == b.keys() and len(a["metrics"]) >= 4
    for key in a:
        assert a[key] == b[key], key
    summary = json.loads((busy / "summary.json").read_text())
    assert summary["warm_start"]["steps"] == 6 and not summary["warm_start"]["cached"]
