"""A package outside skillduet (tests/outside_package/), installed with pip, adds an environment, a selector and an
LLM backend through the ``skillduet.envs`` / ``skillduet.selectors`` / ``skillduet.backends`` entry-point groups,
and ``skillduet train`` uses all three with nothing edited in skillduet: it plays the package's environment, scores
and ranks candidates by the package's selector and sends its analyzer and synthesizer requests to the package's
backend. ``skillduet envs show`` names the package's entry point as the environment's provider and shows its
extras. verl's real ``fit()`` on CPU does the same with the package on the PYTHONPATH of its Ray workers."""

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


FIT_TIMEOUT = 1400  # as the other verl CPU fits (tests/verl/test_real_fit.py): ~3 min idle, far more under load


def _log_tail(path: Path, n: int = 6000) -> str:
    return path.read_text(errors="replace")[-n:] if path.exists() else "(no log)"


@pytest.mark.slow
def test_a_verl_cpu_fit_uses_the_installed_package_env_selector_and_backend(tmp_path):
    """verl's ``main_ppo``/``fit()`` (CPU rollout backend), 2 steps, with the package's folder on the PYTHONPATH of
    the run and of its Ray workers: the agent loop plays ``lanterns``, the trainer scores candidates by
    ``quietest`` and the ``logged`` backend writes the Local skills. Without the folder the same fit stops before
    Ray with the one-line error naming the environment."""
    for module in ("verl", "ray", "transfer_queue"):
        pytest.importorskip(module)
    from skillduet_plugin.skills.bank import SkillBank
    from skillduet_testing.verl_cpu_run import read_metrics, run

    site = _install(tmp_path)
    out, metrics, log = tmp_path / "fit", tmp_path / "fit.jsonl", tmp_path / "fit.log"
    # lanterns has 3 tasks: 2 per step (verl drops an incomplete last batch)
    overrides = ["skillduet.env.name=lanterns", "skillduet.selector=quietest", "skillduet.analyzer.kind=logged",
                 "data.train_batch_size=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2"]
    code = run(out, steps=2, save_freq=-1, metrics=str(metrics), log=str(log), timeout=FIT_TIMEOUT,
               overrides=overrides, pythonpath=[str(site)])
    assert code == 0, f"the fit exited {code}:\n{_log_tail(log)}"
    steps = read_metrics(metrics)
    assert sorted(steps) == [1, 2]
    for step, m in steps.items():
        assert m["skillduet/trajectories"] == 4 and m["skillduet/local_skills"] > 0, step

    bank = SkillBank(out / "checkpoints" / "skillduet" / "bank.sqlite", readonly=True)
    try:
        local, versions = bank.candidates(), bank.history()
    finally:
        bank.close()
    # the package's environment: its tasks were played (and quoted by the analyzer), under its task type
    assert local and {c.metadata["task_id"] for c in local} <= {"lantern-red", "lantern-blue", "lantern-green"}
    assert all(c.scope == "lanterns" and c.metadata["task"] in c.text for c in local)
    assert all(c.text.rstrip().endswith("Written by the lanterns backend.") for c in local)  # the package's backend
    scored = [c.scores for c in local if c.scores.get("strength") is not None]
    assert scored and all(s["quietest"] == pytest.approx(-s["strength"]) for s in scored)  # the package's selector
    assert versions and {v.selector for v in versions} == {"quietest"}  # ranked by it at consolidation

    # negative control: the same fit (the dataset built above) without the package's folder
    missing_log = tmp_path / "missing.log"
    code = run(tmp_path / "missing", steps=2, save_freq=-1, log=str(missing_log), timeout=FIT_TIMEOUT,
               overrides=overrides, train_file=str(out / "lanterns" / "train.parquet"))
    text = missing_log.read_text(errors="replace")
    assert code == 2, f"exited {code}:\n{text[-3000:]}"
    assert "skillduet: skillduet.env.name='lanterns' is invalid: allowed values are " in text, text[-3000:]
    assert "Traceback" not in text and "ray init" not in text.lower()
