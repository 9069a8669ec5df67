"""``skillduet study`` end to end: a micro study (2 arms x 2 seeds, 5 RL steps, a 2-game panel) is SIGKILLed in
the middle of a run, started again, and finishes without redoing the runs that were complete."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytest.importorskip("alfworld")

REPO = Path(__file__).resolve().parents[2]


def _command(games: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "skillduet_plugin.cli", "study", f"data_dir={games}", "model=tiny", "steps=5",
            "tasks_per_step=1", "num_generations=2", "max_turns=2", "eval_tasks=2", "warm_start.games=2",
            "warm_start.steps=2", "skillduet.consolidation_interval=1", "save_steps=1",
            "--methods", "grpo,strength", "--seeds", "0,1", "--output-dir", str(out)]


def _resumable(run: Path) -> bool:
    from skillduet_plugin.config import ConfigError
    from skillduet_plugin.runs.trl_runner import resume_point  # imported before the study starts (see the test)

    try:
        return (run / "config.yaml").is_file() and resume_point(run) is not None
    except ConfigError:
        return False


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ, SKILLDUET_CACHE=str(tmp_path / "cache"), PYTHONPATH=str(REPO))
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


@pytest.mark.slow
def test_study_killed_midway_resumes_and_reports_every_method(games, tmp_path):
    out = tmp_path / "study"
    _resumable(out)  # its imports take seconds on a loaded machine: done now, the polling below must be fast
    log = (tmp_path / "first.log").open("w")
    proc = subprocess.Popen(_command(games, out), cwd=tmp_path, env=_env(tmp_path), stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    victim = out / "runs" / "strength-s0"
    deadline = time.time() + 150
    try:
        # freeze it as soon as the second run has a complete checkpoint (step 1 of 5), then kill it
        while time.time() < deadline and proc.poll() is None:
            if _resumable(victim):
                os.killpg(proc.pid, signal.SIGSTOP)
                break
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        log.close()
    first_log = (tmp_path / "first.log").read_text()
    assert proc.returncode == -signal.SIGKILL, f"the study ended before it was killed:\n{first_log[-3000:]}"
    done = out / "runs" / "grpo-s0"
    assert (done / "summary.json").is_file() and (out / "shared_model" / "config.json").is_file()
    assert not (victim / "summary.json").exists(), "the run finished before it was stopped"
    stamped = (done / "summary.json", done / "study_run.json", out / "before.json",
               out / "shared_model" / "config.json")
    stamp = {p: p.stat().st_mtime_ns for p in stamped}

    # the rest in two worker processes at once: the resumed run and the two fresh ones
    again = subprocess.run(_command(games, out) + ["--jobs", "2"], cwd=tmp_path, env=_env(tmp_path),
                           capture_output=True, text=True, timeout=240)
    assert again.returncode == 0, again.stderr[-3000:]
    # completed work is not redone: same files, untouched
    assert {p: p.stat().st_mtime_ns for p in stamp} == stamp
    starts = {r: json.loads((out / "runs" / r / "study_run.json").read_text())["start"]
              for r in ("grpo-s0", "strength-s0", "grpo-s1", "strength-s1")}
    assert starts["grpo-s0"] == "fresh" and starts["strength-s0"] == "resumed"
    assert starts["grpo-s1"] == starts["strength-s1"] == "fresh"
    for run in starts:
        metrics = [json.loads(x) for x in (out / "runs" / run / "metrics.jsonl").read_text().splitlines()]
        assert [m["step"] for m in metrics if "event" not in m] == [1, 2, 3, 4, 5], run  # none lost or doubled
    # every run starts from the shared model, and the SkillDuet runs carry the Table-3 neutral condition
    for run in starts:
        cfg = (out / "runs" / run / "config.yaml").read_text()
        assert f"model: {out / 'shared_model'}" in cfg and "eval_before: false" in cfg
    assert (out / "runs" / "strength-s1" / "eval" / "neutral.json").is_file()
    assert not (out / "runs" / "grpo-s1" / "eval" / "neutral.json").exists()

    report = (out / "report.md").read_text()
    assert "| GRPO | 2 |" in report and "| SkillDuet (Strength) | 2 |" in report and "Not finished" not in report
    assert "Learned Global" in report and "Length-matched neutral" in report
    # the RL training tasks are measured before (once) and after every run, and reported apart from the panel
    assert (out / "before_train.json").is_file() and (out / "runs" / "grpo-s1" / "eval" / "after_train.json").is_file()
    assert "## The RL training tasks (not a held-out result)" in report
    # the sampled policy (eval_samples episodes per task) is reported beside greedy success on the training tasks;
    # the panel stays greedy (eval_panel_samples 0), so its table has no sampled column
    assert "Success % (sampled policy)" in report and "4 episodes per task at temperature 1.0" in report
    assert "Sampled success %" not in report
    assert (out / "curves.png").stat().st_size > 0 and (out / "panel.png").stat().st_size > 0
    # the mechanism chain for the arm with Local skills (the resumed run's teacher checks included)
    section = report.split("## The mechanism chain", 1)[1].split("\n## ", 1)[0]
    assert "| SkillDuet (Strength) | 2 |" in section and "GRPO" not in section
    assert "Student after - teacher before" in section and (out / "mechanism.png").stat().st_size > 0
    assert (out / "runs" / "strength-s0" / "eval" / "teacher_before_train.json").is_file()
    assert not (out / "runs" / "grpo-s0" / "eval" / "teacher_before_train.json").exists()
    assert again.stdout.strip().splitlines()[-1] == str(out / "report.md")
