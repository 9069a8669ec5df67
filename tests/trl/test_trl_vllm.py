"""``SkillDuetGRPOTrainer`` with ``use_vllm=True, vllm_mode="colocate"`` on vLLM's CPU build: the episodes of two
steps are sampled by TRL's in-process vLLM engine (weights synced every step), with OPD and Strength on them."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.trl]
HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed (scripts/setup.sh installs its CPU build)")
    from skillduet_plugin.warmstart.tiny_model import build_tiny

    # vLLM's CPU attention needs head_dim >= 32: the "base" shape (head_dim 32)
    model_dir = build_tiny(tmp_path_factory.mktemp("tiny_base"), size="base")
    out = tmp_path_factory.mktemp("trl_vllm")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parents[1]), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, str(HERE / "vllm_colocate_run.py"), str(model_dir), str(out)], env=env,
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-8000:]
    return json.loads((out / "report.json").read_text())


def test_vllm_generates_every_episode_turn(report):
    # the rollout's own episodes are exactly the tokens vLLM produced (hf_generate_fn raises in that process)
    assert report["generate_calls"] >= 2 and report["generated_tokens"] > 0
    policy_tokens = {tuple(ids) for call in report["generated"] for ids in call if ids}
    first_turns = [ids for ids in report["episodes"] if ids]
    assert len(report["episodes"]) == 8 and first_turns
    assert all(any(tuple(ep[:len(t)]) == t for t in policy_tokens) for ep in first_turns)
    assert report["syncs"] == [0, 1]  # TRL synced the policy's weights into vLLM before each step's rollout


def test_sampling_logprobs_match_the_trainer_forward(report):
    # vLLM's sampled-token log-probs reach TRL aligned with the completion tokens: its importance-sampling check
    # compares them with the trainer's own forward, and a misalignment would show as a gap of nats
    train = [r for r in report["logs"] if "sampling/sampling_logp_difference/mean" in r]
    assert len(train) == 2
    assert all(r["sampling/sampling_logp_difference/mean"] < 0.05 for r in train)


def test_opd_and_strength_run_on_vllm_rollouts(report):
    train = [r for r in report["logs"] if "opd/supervised_ratio" in r]
    assert len(train) == 2
    assert any(r["opd/supervised_ratio"] > 0 for r in train)
    assert any(r.get("opd/gate_mean", 0.0) > 0 for r in train)
    assert all(math.isfinite(r.get("opd/loss", 0.0)) for r in train)
    assert report["candidates"] and report["scored"] > 0 and report["globals"]
