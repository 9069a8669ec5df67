"""Two CPU processes (gloo, launched with torchrun): one bank writer, one Global version everywhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from skillduet_plugin.skills.bank import BANK_FILENAME, SkillBank

SCRIPT = Path(__file__).with_name("multiproc_run.py")


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
