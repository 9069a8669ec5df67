"""``skillduet train --resume RUN_DIR``: a real ``skillduet train`` process is SIGKILLed mid-run; the resumed run's
per-step metrics and skill bank equal those of an uninterrupted run. Two RL games, one per step: an epoch of the
task sampler is two steps, so the run is killed and resumed in its second epoch, whose task order differs from the
first's (TRL's sampler rebuilt on resume would replay the first's: found by a study run resumed at step 5)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytest.importorskip("alfworld")

REPO = Path(__file__).resolve().parents[2]
STEPS = 4
# Keys that measure time, not training.
VOLATILE = ("time/", "step_time", "runtime", "per_second", "elapsed")


def _args(games: Path) -> list[str]:
    return [f"data_dir={games}", "model=tiny", f"steps={STEPS}", "save_steps=1", "tasks_per_step=1", "train_tasks=2",
            "num_generations=2", "max_turns=2", "max_new_tokens_per_turn=16", "eval_before=false",
            "eval_after=false", "warm_start.enabled=false", "skillduet.consolidation_interval=1", "threads=1"]


def _env(cache: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), SKILLDUET_CACHE=str(cache), HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false", WANDB_MODE="disabled",
               TRL_EXPERIMENTAL_SILENCE="1")
    return env


def _steps(run: Path) -> dict[int, dict]:
    from skillduet_plugin.runs.rundir import read_metrics, step_records

    return {int(r["step"]): {k: v for k, v in r.items() if not any(x in k for x in VOLATILE)}
            for r in step_records(read_metrics(run))}


def _bank(run: Path) -> list:
    from skillduet_plugin.skills.bank import SkillBank

    bank = SkillBank(run / "skill_bank.sqlite", readonly=True)
    try:
        return [(v.scope, v.version, v.step, v.items) for v in bank.history()] + \
            [(c.skill_id, c.step, c.text, c.scores.get("strength")) for c in bank.candidates()]
    finally:
        bank.close()


def _task_order(run: Path) -> list[str]:
    """The game each RL step played (one per step)."""
    order = []
    for path in sorted((run / "trajectories").glob("step_*.jsonl")):
        [task] = {json.loads(line)["task_id"] for line in path.read_text().splitlines()}
        order.append(task)
    return order


def _train(args: list[str], env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "skillduet_plugin.cli", "train", *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_sigkill_then_resume_equals_an_uninterrupted_run(games, tmp_path):
    env = _env(tmp_path / "cache")
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    done = _train(_args(games) + ["--output-dir", str(whole)], env)
    assert done.returncode == 0, done.stderr[-2000:]
    # what the kill below relies on: the second epoch (steps 3-4) plays both games in the other order than the
    # first, so a resume that replayed epoch 0's order would train step 3 on the wrong game (with two games this is
    # a property of the seed, held here; the sampler's own negative control is in tests/trl/test_trl_sampler.py)
    order = _task_order(whole)
    assert len(order) == STEPS and set(order[:2]) == set(order[2:]) and len(set(order)) == 2
    assert order[2:] == order[:2][::-1], order

    proc = subprocess.Popen([sys.executable, "-m", "skillduet_plugin.cli", "train", *_args(games),
                             "--output-dir", str(broken)], env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    marker = broken / "checkpoints" / "checkpoint-2" / "skillduet" / "skill_bank.sqlite"
    deadline = time.monotonic() + 600
    while not marker.is_file() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed"
    time.sleep(0.3)  # into step 3, the second epoch: rollout / extraction / update
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert max(_steps(broken), default=0) < STEPS

    resumed = _train(["--resume", str(broken)], env)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming from" in resumed.stderr and resumed.stdout.strip().splitlines()[-1] == str(broken.resolve())

    a, b = _steps(whole), _steps(broken)
    assert sorted(a) == sorted(b) == list(range(1, STEPS + 1))
    for step in a:
        assert a[step].keys() == b[step].keys()
        for key, value in a[step].items():
            assert b[step][key] == pytest.approx(value, rel=1e-5, abs=1e-7), (step, key)
    assert _bank(whole) == _bank(broken)
    assert _task_order(broken) == order

    # stopped after its last RL step (while evaluating): resuming evaluates that step's model, trains no step more
    late = tmp_path / "late"
    shutil.copytree(whole, late)
    shutil.rmtree(late / "final_model")
    (late / "summary.json").unlink()
    resumed = _train(["--resume", str(late)], env)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "is the last RL step" in resumed.stderr
    assert sorted(_steps(late)) == list(range(1, STEPS + 1))
    assert _weights(late / "final_model") == _weights(whole / "final_model")
    assert _bank(whole) == _bank(late)


def _weights(folder: Path) -> str:
    import hashlib

    from safetensors.torch import load_file

    tensors = load_file(str(folder / "model.safetensors"))
    return hashlib.sha256(b"".join(tensors[k].numpy().tobytes() for k in sorted(tensors))).hexdigest()


def test_resume_refuses_a_folder_without_a_checkpoint(tmp_path, capsys):
    from skillduet_plugin.cli import main

    assert main(["train", "--resume", str(tmp_path)]) == 2
    assert "holds no config.yaml" in capsys.readouterr().err
    (tmp_path / "config.yaml").write_text("steps: 2\n")
    assert main(["train", "--resume", str(tmp_path)]) == 2
    assert "no complete checkpoint" in capsys.readouterr().err
