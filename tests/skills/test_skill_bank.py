"""The SQLite skill bank: candidates and scores, immutable Global versions, snapshot/restore, concurrent readers."""

from __future__ import annotations

import json
import multiprocessing as mp
import sqlite3
import time

import pytest

from skillduet_plugin.skills.bank import BANK_FILENAME, SkillBank
from skillduet_plugin.skills.export import diff_versions, export_json, export_markdown
from skillduet_plugin.skills.types import Skill


def _skill(text: str, scope: str = "clean", step: int = 1) -> Skill:
    return Skill(text=text, scope=scope, kind="procedure", source_traj_ids=(f"{step}-a",), step=step)


def _version(scope: str, items: list[str]) -> dict:
    return {"scope": scope, "items": items, "text": "\n".join(f"- {i}" for i in items), "selector": "strength",
            "report": {"kept": [], "rejected": []}}


def _fill(bank: SkillBank, step: int) -> None:
    bank.add_candidates([_skill(f"advice made at step {step}", step=step)], step)
    if step % 2 == 0:
        bank.commit_consolidation(step, [_version("clean", [f"global item of step {step}"])])


def test_candidates_scores_and_recent_window(tmp_path):
    bank = SkillBank(tmp_path / BANK_FILENAME)
    a, b = _skill("open the fridge first", step=1), _skill("clean it at the sinkbasin", step=2)
    assert bank.add_candidates([a], 1) == 1 and bank.add_candidates([a], 1) == 0  # once per step
    bank.add_candidates([b], 2)
    bank.record_scores({a.skill_id: {"strength": 0.5, "utility": None, "contrast": -0.1, "n_heldout": 3,
                                     "note": "x"}}, step=1)
    got = {s.skill_id: s for s in bank.candidates(scope="clean")}
    assert got[a.skill_id].scores == {"strength": 0.5, "utility": None, "contrast": -0.1}
    assert got[a.skill_id].metadata["n_heldout"] == 3 and got[b.skill_id].scores["strength"] is None
    bank.commit_consolidation(2, [_version("clean", ["x"])])
    bank.add_candidates([_skill("heat it in the microwave", step=3)], 3)
    assert [s.step for s in bank.recent_candidates("clean", 3)] == [3]
    assert [s.step for s in bank.recent_candidates("clean", 2)] == [1, 2]  # the window the step-2 run saw


def test_global_versions_are_immutable_and_chained(tmp_path):
    bank = SkillBank(tmp_path / BANK_FILENAME)
    assert bank.current_global("clean").version is None and bank.current_global("clean").text == ""
    v1, = bank.commit_consolidation(10, [_version("clean", ["a item one"])])
    v2, w1 = bank.commit_consolidation(20, [_version("clean", ["b item two"]), _version("heat", ["h"])])
    assert (v1.version, v1.parent_version, v2.version, v2.parent_version, w1.version) == (1, None, 2, 1, 1)
    assert bank.current_global("clean").items == ["b item two"]
    assert bank.global_at("clean", 15).items == ["a item one"] and bank.global_at("clean", 5).version is None
    assert [v.version for v in bank.history("clean")] == [1, 2]
    assert bank.last_consolidation_step() == 20 and bank.last_consolidation_step(19) == 10
    assert bank.global_version("clean", 1).items == ["a item one"]  # older versions unchanged
    assert bank.scopes() == ["clean", "heat"]


def test_snapshot_at_step_k_restores_exactly_that_bank_after_later_writes(tmp_path):
    bank = SkillBank(tmp_path / "run" / BANK_FILENAME)
    for step in range(1, 5):
        _fill(bank, step)
    snap = bank.snapshot(tmp_path / "ckpt-4")
    assert snap.name == BANK_FILENAME and not list((tmp_path / "ckpt-4").glob(".*tmp*"))
    expected = export_json(bank)
    for step in range(5, 9):
        _fill(bank, step)
    assert export_json(bank) != expected
    bank.restore(tmp_path / "ckpt-4")
    assert export_json(bank) == expected
    assert bank.current_global("clean").items == ["global item of step 4"]
    _fill(bank, 5)  # the restored bank is writable and continues from step 4
    assert [s.step for s in bank.candidates()] == [1, 2, 3, 4, 5]
    # a fresh process opening the file sees the restored state too
    other = SkillBank(tmp_path / "run" / BANK_FILENAME, readonly=True)
    assert [s.step for s in other.candidates()] == [1, 2, 3, 4, 5]


def test_rollback_to_forgets_later_rows(tmp_path):
    bank = SkillBank(tmp_path / BANK_FILENAME)
    for step in range(1, 7):
        _fill(bank, step)
    bank.rollback_to(4)
    assert max(s.step for s in bank.candidates()) == 4
    assert bank.current_global("clean").items == ["global item of step 4"]
    assert bank.last_consolidation_step() == 4


def test_readonly_bank_never_creates_or_writes(tmp_path):
    path = tmp_path / BANK_FILENAME
    reader = SkillBank(path, readonly=True)
    assert reader.current_global("clean").version is None and reader.candidates() == []
    assert not path.exists()
    with pytest.raises(PermissionError, match="read-only"):
        reader.add_candidates([_skill("open the drawer first")], 1)
    writer = SkillBank(path)
    writer.commit_consolidation(1, [_version("clean", ["an item"])])
    assert reader.current_global("clean").items == ["an item"]
    with pytest.raises(PermissionError):
        reader.rollback_to(0)


def _writer(path: str, n: int, started) -> None:
    bank = SkillBank(path)
    started.set()
    for step in range(1, n + 1):
        bank.add_candidates([_skill(f"advice {step}", step=step)], step)
        bank.commit_consolidation(step, [_version("clean", [f"item {step}"])])
        time.sleep(0.01)  # leave the reader time to interleave


def test_concurrent_reader_sees_consistent_states_while_a_process_writes(tmp_path):
    path = str(tmp_path / BANK_FILENAME)
    SkillBank(path).close()
    ctx = mp.get_context("spawn")
    started = ctx.Event()
    proc = ctx.Process(target=_writer, args=(path, 60, started))
    proc.start()
    reader = SkillBank(path, readonly=True)
    assert started.wait(60)
    seen = []
    deadline = time.time() + 60
    while proc.is_alive() and time.time() < deadline:
        g = reader.current_global("clean")
        if g.version is not None:
            # a version and its items are written in one transaction: never a torn read
            assert g.items == [f"item {g.version}"]
            seen.append(g.version)
            assert len(reader.candidates(until_step=g.version)) >= g.version
    proc.join(60)
    assert proc.exitcode == 0
    assert reader.current_global("clean").version == 60
    assert seen and seen == sorted(seen)  # the reader read during the writes; versions only move forward


def test_export_and_diff(tmp_path):
    bank = SkillBank(tmp_path / BANK_FILENAME)
    bank.add_candidates([_skill("open the fridge | first")], 1)
    bank.commit_consolidation(10, [_version("clean", ["keep this", "old advice"])])
    bank.commit_consolidation(20, [_version("clean", ["keep this", "new advice"])])
    data = json.loads(export_json(bank))
    assert [v["version"] for v in data["scopes"]["clean"]["versions"]] == [1, 2]
    assert data["candidates"][0]["text"] == "open the fridge | first"
    md = export_markdown(bank)
    assert "### Current Global (version 2, step 20)" in md and "- new advice" in md and "\\|" in md
    diff = diff_versions(bank, "clean", 1, 2)
    assert "-- old advice" in diff and "+- new advice" in diff
    with pytest.raises(ValueError, match="known versions are 1, 2"):
        diff_versions(bank, "clean", 1, 7)


def test_snapshot_is_a_self_contained_sqlite_file(tmp_path):
    bank = SkillBank(tmp_path / "a" / BANK_FILENAME)
    _fill(bank, 2)
    snap = bank.snapshot(tmp_path / "snap")
    conn = sqlite3.connect(snap)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert conn.execute("SELECT COUNT(*) FROM global_versions").fetchone()[0] == 1
    conn.close()
