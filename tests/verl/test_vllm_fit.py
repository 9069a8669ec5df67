"""verl's real ``main_ppo`` / ``fit()`` with verl's own vLLM rollout on vLLM's CPU engine, with the plugin.

verl's ``vLLMReplica`` / ``vLLMHttpServer`` / ``ServerAdapter`` and vLLM's engine serve the rollouts and the
teacher/Strength prefills (``prompt_logprobs``); the weights reach the server through verl's bucketed transfer
(shared-memory path). Every assertion reads what verl wrote (file-logger metrics, checkpoints, exit code).
Three engine starts in all (one fit, a resume, the resume again without its start-up sync).
"""

from __future__ import annotations

import math
import os
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("verl")
pytest.importorskip("ray")
pytest.importorskip("transfer_queue")
pytest.importorskip("vllm")

from skillduet_testing.verl_cpu_run import read_metrics  # noqa: E402
from skillduet_testing.verl_vllm import SKIP_SYNC_ENV, run  # noqa: E402
from test_real_fit import (GAP, _bank_globals, assert_rollout_synced, assert_server_logprobs_match,  # noqa: E402
                           rollback_live_bank)

REPO = Path(__file__).resolve().parents[2]
RUN_TIMEOUT = 1800  # one fit took ~9 min at load 20-28 on 2 cores (engine start dominates); the test 505 s at 16-31


def _tail(path: Path, n: int = 6000) -> str:
    return path.read_text(errors="replace")[-n:] if path.exists() else "(no log)"


def _fit(out: Path, name: str, **kwargs) -> dict[int, dict]:
    metrics, log = out / f"{name}.jsonl", out / f"{name}.log"
    code = run(out, metrics=str(metrics), log=str(log), timeout=RUN_TIMEOUT, **kwargs)
    assert code == 0, f"{name} exited {code}:\n{_tail(log)}"
    return read_metrics(metrics)


@pytest.mark.slow
def test_skillduet_fit_on_verl_vllm_rollout_then_resume(tmp_path):
    """2 steps with ``teacher_logprobs=compare`` (the teacher and Strength prefills from the vLLM server checked
    against the actor, with the same tolerances as the transformers test backend), a checkpoint every step; then
    a resume for step 3 from step 2's checkpoint, the live bank first rolled back to step 1 (so a resume that did
    not restore step 2's bank would show it): its start-up sync puts the actor's weights on the server. Negative
    control: the same resume with that sync skipped keeps the server's dummy start-up weights, and the gap check
    fails."""
    metrics = _fit(tmp_path, "skillduet", steps=2, save_freq=1, overrides=["skillduet.teacher_logprobs=compare"])
    assert sorted(metrics) == [1, 2]
    assert_rollout_synced(metrics, [1, 2])  # step 1: verl's start-up sync; step 2: the sync after step 1
    for step, m in metrics.items():
        assert m["skillduet/trajectories"] == 8 and m["skillduet/local_skills"] > 0, step
        assert math.isfinite(m["actor/skillduet/opd_loss"]), step
        assert_server_logprobs_match(m, step)
        assert m["skillduet/groups_prefetched"] >= 1 and m["skillduet/teacher_rows_prefetched"] >= 1, step
    assert metrics[1]["skillduet/rollout_global_version"] == -1
    assert metrics[2]["skillduet/rollout_global_version"] >= 1  # step 1's Global was in step 2's prompts
    saved = _bank_globals(tmp_path / "checkpoints" / "global_step_2" / "skillduet" / "bank")
    assert saved and all(saved.values())

    ckpt = tmp_path / "checkpoints"
    rollback_live_bank(ckpt, 1)
    resumed = _fit(tmp_path, "resumed", steps=3, save_freq=1)
    assert sorted(resumed) == [3]
    newest = max(v for versions in saved.values() for v, _ in versions)
    assert resumed[3]["skillduet/rollout_global_version"] == newest  # step 3 prompts carry step 2's Global
    assert resumed[3]["skillduet/local_skills"] > 0 and math.isfinite(resumed[3]["actor/skillduet/opd_loss"])
    assert_rollout_synced(resumed, [3])  # the resume's start-up sync reached the vLLM server

    # negative control: step 3 again from step 2's checkpoint, the start-up sync skipped
    (ckpt / "latest_checkpointed_iteration.txt").write_text("2")
    rollback_live_bank(ckpt, 2)
    unsynced = _fit(tmp_path, "unsynced", steps=3, save_freq=0, extra_env={SKIP_SYNC_ENV: "2"})
    assert sorted(unsynced) == [3]
    assert unsynced[3][GAP] > 1e-5, "a skipped sync should leave the server on its start-up (dummy) weights"
    with pytest.raises(AssertionError, match="gap"):
        assert_rollout_synced(unsynced, [3])


@pytest.mark.slow  # builds the tiny64 model and generated games, then one verl config composition
def test_cpu_vllm_recipe_dry_run(tmp_path):
    env = dict(os.environ, DRY_RUN="1", PYTHONPATH=str(REPO), OUT=str(tmp_path / "run"))
    proc = subprocess.run(["bash", str(REPO / "recipes" / "cpu_vllm_alfworld.sh")], capture_output=True,
                          text=True, env=env, timeout=600, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "trainer_mode: skillduet_sync" in out and "# DRY_RUN" in out and "exit code 0" in out
    assert "name: vllm" in out and "enable_sleep_mode: false" in out and "dtype: float32" in out
