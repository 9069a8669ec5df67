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
    assert len(report["episodes"]) == 12 and first_turns  # 3 steps x 4 episodes
    assert all(any(tuple(ep[:len(t)]) == t for t in policy_tokens) for ep in first_turns)
    # TRL synced the policy's weights into vLLM before each step's rollout but the last (skipped on purpose)
    assert report["syncs"] == [0, 1] and report["skipped_syncs"] == [2]


def test_sampling_logprobs_match_the_trainer_forward(report):
    # vLLM's sampled-token log-probs reach TRL aligned with the completion tokens: its importance-sampling check
    # compares them with the trainer's own forward, and a misalignment would show as a gap of nats
    gaps = [r["sampling/sampling_logp_difference/mean"] for r in report["logs"]
            if "sampling/sampling_logp_difference/mean" in r]
    assert len(gaps) == 3
    print("sampling log-prob gaps per step", gaps)
    assert all(gap < 0.05 for gap in gaps[:2]), gaps
    # negative control: the step whose weights were not synced samples with the previous step's weights
    assert gaps[2] > 0.05, gaps


def test_opd_and_strength_run_on_vllm_rollouts(report):
    train = [r for r in report["logs"] if "opd/supervised_ratio" in r]
    assert len(train) == 3
    supervised = [r for r in train if r["opd/supervised_ratio"] > 0]
    assert supervised  # a step whose episodes got a Local skill: its OPD metrics are logged, none may be missing
    assert all(r["opd/gate_mean"] > 0 and math.isfinite(r["opd/loss"]) for r in supervised)
    assert report["candidates"] and report["scored"] > 0 and report["globals"]
