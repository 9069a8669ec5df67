"""A package outside skillduet (tests/outside_package/), installed with pip, adds an environment, a selector and an
LLM backend through the ``skillduet.envs`` / ``skillduet.selectors`` / ``skillduet.backends`` entry-point groups,
and ``skillduet train`` uses all three with nothing edited in skillduet: it plays the package's environment, scores
and ranks candidates by the package's selector and sends its analyzer and synthesizer requests to the package's
backend. ``skillduet envs show`` names the package's entry point as the environment's provider and shows its
extras."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).with_name("outside_package")
REPO = Path(__file__).resolve().parents[1]


def _install(tmp_path: Path) -> Path:
    """``pip install --target`` of a copy of the package folder (a folder of its own: the shared environment, which
    other runs may be using, never sees the package)."""
    src, site = tmp_path / "src", tmp_path / "site"
    shutil.copytree(PACKAGE, src)
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                           "--no-build-isolation", "--target", str(site), str(src)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (site / "lanterns_env.py").is_file()
    return site


def _skillduet(args: list[str], site: Path | None, tmp_path: Path) -> subprocess.CompletedProcess:
    script = Path(sys.executable).with_name("skillduet")
    command = [str(script)] if script.is_file() else [sys.executable, "-m", "skillduet_plugin.cli"]
    path = os.pathsep.join([*([str(site)] if site else []), str(REPO)])
    env = dict(os.environ, PYTHONPATH=path, SKILLDUET_CACHE=str(tmp_path / "cache"), OMP_NUM_THREADS="1",
               LANTERNS_BACKEND_LOG=str(tmp_path / "backend.jsonl"))
    return subprocess.run(command + args, capture_output=True, text=True, env=env, cwd=tmp_path)


@pytest.mark.slow
def test_an_installed_package_adds_an_env_a_selector_and_a_backend_that_train_uses(tmp_path, tiny_model_dir):
    run = tmp_path / "run"
    common = [f"model={tiny_model_dir}", "steps=1", "tasks_per_step=2", "num_generations=2", "train_tasks=2",
              "eval_tasks=3", "eval_training_tasks=0", "eval_samples=0", "eval_before=false", "max_turns=2",
              "action_selection=choose", "warm_start.enabled=false", "save_steps=0", "threads=1",
              "skillduet.consolidation_interval=1", "--output-dir", str(run)]
    mine = ["env=lanterns", "skillduet.selector=quietest", "skillduet.analyzer.kind=logged",
            "skillduet.synthesizer.kind=logged"]
    # negative controls: without the package, each of the three names is refused before any work
    for given, error in ((mine, "env='lanterns' is invalid"),
                         (["env=toy", mine[1]], "skillduet.selector='quietest' is invalid"),
                         (["env=toy", mine[2]], "skillduet.analyzer.kind='logged' is invalid")):
        missing = _skillduet(["train", *given, *common], None, tmp_path)
        assert missing.returncode == 2 and error in missing.stderr, missing.stderr[-2000:]
    assert not run.exists()

    site = _install(tmp_path)
    shown = _skillduet(["envs", "show", "lanterns"], site, tmp_path)  # what the package registered, and by whom
    assert shown.returncode == 0, shown.stderr[-2000:]
    for line in ("  provided by: entry point lanterns = 'lanterns_env' of group skillduet.envs, package skillduet",
                 "lanterns: ``lanterns``: light the lantern the task names", "  task types: lanterns",
                 "  extras:\n    colours: red, blue, green\n"):
        assert line in shown.stdout, shown.stdout
    done = _skillduet(["train", *mine, *common], site, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    trajectories = [json.loads(line) for line in (run / "trajectories" / "step_000001.jsonl").read_text().splitlines()]
    assert {t["task_id"] for t in trajectories} == {"lantern-red", "lantern-blue"}  # the package's environment
    requests = [json.loads(line)["kind"] for line in (tmp_path / "backend.jsonl").read_text().splitlines()]
    assert any(k.startswith("local_") for k in requests) and "synthesize" in requests  # the package's backend

    from skillduet_plugin.skills.bank import SkillBank

    bank = SkillBank(run / "skill_bank.sqlite", readonly=True)
    try:
        scores = [c.scores for c in bank.candidates()]
        versions = bank.history()
    finally:
        bank.close()
    scored = [s for s in scores if s.get("strength") is not None]
    assert scored and all(s["quietest"] == pytest.approx(-s["strength"]) for s in scored)  # the package's score
    assert versions and {v.selector for v in versions} == {"quietest"}  # ranked by it at consolidation
