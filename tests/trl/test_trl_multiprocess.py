"""Two CPU processes (gloo, launched with torchrun): one bank writer, one Global version everywhere, and the OPD
term of each rank such that their DDP average is Eq. 1 over both ranks' tokens, as one process would compute it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from skillduet_plugin.skills.bank import BANK_FILENAME, SkillBank

SCRIPT = Path(__file__).with_name("multiproc_run.py")


def assert_opd_is_eq1_over_both_ranks(calls0: list[dict], calls1: list[dict]) -> None:
    """Per optimizer step: both ranks divide by the same count, the supervised tokens of both ranks together;
    the mean over ranks of their summed OPD terms (what DDP's gradient averaging applies) equals Eq. 1 over the
    union of their micro-batches, rebuilt from each micro-batch's own Eq. 1 (``core.opd.opd_loss``) and count."""
    steps = sorted({c["step"] for c in calls0 + calls1})
    assert {c["scale"] for c in calls0 + calls1} == {1.0}  # here one generation batch is one optimizer step
    assert steps and {c["step"] for c in calls0} == {c["step"] for c in calls1} == set(steps)
    checked = 0
    for step in steps:
        mine = [[c for c in calls if c["step"] == step] for calls in (calls0, calls1)]
        union_items = sum(c["local_items"] for calls in mine for c in calls)
        assert {c["num_items"] for calls in mine for c in calls} == {union_items}, step  # one count, all ranks
        if union_items == 0:
            continue
        union = sum(c["local_loss"] * c["local_items"] for calls in mine for c in calls) / union_items
        averaged = sum(sum(c["term"] for c in calls) for calls in mine) / 2
        assert averaged == pytest.approx(union, rel=1e-5, abs=1e-7), step
        # negative control: each rank normalising by its own count (the mean of the two ranks' own Eq. 1) differs
        # whenever their counts and losses differ
        own = [sum(c["local_loss"] * c["local_items"] for c in calls) / max(1.0, sum(c["local_items"] for c in calls))
               for calls in mine]
        if abs(own[0] - own[1]) > 1e-4 and len({sum(c["local_items"] for c in calls) for calls in mine}) == 2:
            assert sum(own) / 2 != pytest.approx(union, rel=1e-5, abs=1e-7), step
        checked += 1
    assert checked >= 1  # at least one step had supervised tokens on some rank


def assert_gate_mean_is_a_token_mean_over_both_ranks(r0, r1):
    """The logged opd/gate_mean of a step is the token mean over both ranks' micro-batches (each rank's own
    stats weighted by its supervised tokens), the same on both ranks."""
    checked = 0
    assert [h["opd/gate_mean"] if "opd/gate_mean" in h else None for h in r0["logged"]] == \
        [h["opd/gate_mean"] if "opd/gate_mean" in h else None for h in r1["logged"]]
    for entry in r0["logged"]:
        calls = [c for c in r0["opd"] + r1["opd"] if c["step"] == entry["step"] - 1]
        tokens = sum(c["tokens"] for c in calls)
        if tokens == 0:
            assert "opd/gate_mean" not in entry
            continue
        union = sum(c["gate_mean"] * c["tokens"] for c in calls) / tokens
        assert entry["opd/gate_mean"] == pytest.approx(union, rel=1e-5), entry["step"]
        checked += 1
    assert checked >= 1


@pytest.mark.slow
def test_two_processes_share_one_bank_and_one_global(tiny_model_dir, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRL_EXPERIMENTAL_SILENCE": "1",
           "PYTHONPATH": str(Path(__file__).resolve().parents[2]) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(SCRIPT),
           str(tiny_model_dir), str(tmp_path)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert (r0["world"], r1["world"]) == (2, 2)
    assert (r0["writes"], r0["readonly_bank"]) == (True, False)
    assert (r1["writes"], r1["readonly_bank"]) == (False, True)
    # Each rank rolled out half of every group; extraction saw the whole step on both.
    for rep in (r0, r1):
        assert [e["local"] for e in rep["extract"]] == [2, 2, 2]
        assert [e["all"] for e in rep["extract"]] == [4, 4, 4]
    assert [h["task_ids"] for h in r0["history"]] == [h["task_ids"] for h in r1["history"]]
    # Same Global version on both ranks at every step, including one made by the main process mid-run.
    assert [h["global_versions"] for h in r0["history"]] == [h["global_versions"] for h in r1["history"]]
    assert any(v is not None for h in r0["history"] for v in h["global_versions"])
    assert r0["globals"] == r1["globals"]
    assert_opd_is_eq1_over_both_ranks(r0["opd"], r1["opd"])
    assert_gate_mean_is_a_token_mean_over_both_ranks(r0, r1)
    # Written once: one candidate row per extracted (skill, step), no duplicates from the second process.
    bank = SkillBank(tmp_path / BANK_FILENAME, readonly=True)
    try:
        rows = bank.candidates()
        assert len(rows) == len({(c.skill_id, c.step) for c in rows}) == sum(e["skills"] for e in r0["extract"])
        assert {v.version for v in bank.history()} >= {1}
        # heldout="teacher": rows captured on both ranks, gathered and scored on the main process
        assert any(c.scores.get("strength") is not None for c in rows)
    finally:
        bank.close()
