"""Bank files that defend themselves: snapshots validated before ``restore`` replaces anything, schema versions
refused or migrated, a lost bank next to its history refused, every bad file named with its fix, and the
``skillduet skills`` CLI answering one line (exit 2) instead of a traceback."""

from __future__ import annotations

import shutil
import sqlite3

import pytest

from skillduet_plugin.cli import main
from skillduet_plugin.skills import bank as bank_module
from skillduet_plugin.skills import bank_files
from skillduet_plugin.skills.bank import BANK_FILENAME, BankError, SkillBank
from skillduet_plugin.skills.types import Skill


def _filled(path, n: int = 40) -> SkillBank:
    bank = SkillBank(path)
    bank.add_candidates([Skill(text=f"Open drawer {i} before taking the knife number {i}.", scope="clean",
                               kind="shared") for i in range(n)], 1)
    bank.commit_consolidation(1, [{"scope": "clean", "items": ["Open the drawer first."], "text": "- Open the drawer "
                                   "first.", "selector": "strength", "report": {}}])
    return bank


def _state(bank: SkillBank) -> tuple:
    return len(bank.candidates()), [v.version for v in bank.history()]


def _snapshot(tmp_path, name="snap"):
    src = _filled(tmp_path / "src" / BANK_FILENAME)
    src.snapshot(tmp_path / name)
    src.close()
    return tmp_path / name / BANK_FILENAME


def test_restore_refuses_a_snapshot_with_garbage_pages_and_keeps_the_live_bank(tmp_path):
    snap = _snapshot(tmp_path)
    data = bytearray(snap.read_bytes())
    assert len(data) >= 4 * 4096
    data[2 * 4096: 3 * 4096] = bytes((7 * i) % 251 for i in range(4096))  # a torn/garbage page
    snap.write_bytes(bytes(data))
    live = _filled(tmp_path / "live" / BANK_FILENAME, n=3)
    before = _state(live)
    with pytest.raises(BankError, match=f"{snap}.*(integrity_check|unreadable)"):
        live.restore(snap.parent)
    assert _state(live) == before
    assert live._connect().execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_restore_refuses_an_empty_or_foreign_snapshot(tmp_path):
    live = _filled(tmp_path / "live" / BANK_FILENAME, n=3)
    size = live.path.stat().st_size
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / BANK_FILENAME).write_bytes(b"")
    with pytest.raises(BankError, match="is empty"):
        live.restore(empty)
    (empty / BANK_FILENAME).write_bytes(b"not a database at all" * 100)
    with pytest.raises(BankError, match="not an SQLite file"):
        live.restore(empty)
    other = sqlite3.connect(str(empty / BANK_FILENAME.replace(".sqlite", "2.sqlite")))
    other.execute("CREATE TABLE t (x)")
    other.commit()
    other.close()
    shutil.move(str(empty / BANK_FILENAME.replace(".sqlite", "2.sqlite")), str(empty / BANK_FILENAME))
    with pytest.raises(BankError, match="table candidates is missing"):
        live.restore(empty)
    assert _state(live) == (3, [1]) and live.path.stat().st_size == size


def test_restore_replaces_a_damaged_live_bank(tmp_path):
    snap = _snapshot(tmp_path)
    live_path = tmp_path / "live" / BANK_FILENAME
    live_path.parent.mkdir()
    live_path.write_bytes(b"garbage" * 1000)
    bank = SkillBank(live_path)  # a resume must be able to open it to restore it
    with pytest.raises(BankError, match=f"skill bank {live_path} is unreadable.*restore it from a checkpoint"):
        bank.candidates()
    with pytest.raises(BankError, match="unreadable"):  # a fresh start on it stops before any work
        bank.check_not_lost(tmp_path / "checkpoints")
    bank.restore(snap.parent)
    assert _state(bank) == (40, [1])


def test_newer_schema_is_refused_and_a_renamed_column_is_named(tmp_path):
    path = tmp_path / BANK_FILENAME
    _filled(path).close()
    conn = sqlite3.connect(str(path))
    conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    for readonly in (False, True):
        with pytest.raises(BankError, match="schema version 99, newer than this skillduet reads"):
            SkillBank(path, readonly=readonly).candidates()
    conn = sqlite3.connect(str(path))
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(bank_files.SCHEMA_VERSION),))
    conn.execute("ALTER TABLE candidates RENAME COLUMN score_note TO score_note_v2")
    conn.commit()
    conn.close()
    for readonly in (False, True):
        with pytest.raises(BankError, match=f"{path}.*candidates lacks column.*score_note"):
            SkillBank(path, readonly=readonly).candidates()


def test_an_older_schema_is_migrated_in_place(tmp_path, monkeypatch):
    path = tmp_path / BANK_FILENAME
    _filled(path).close()
    calls = []

    def to_v3(conn):
        calls.append(1)
        conn.execute("CREATE INDEX IF NOT EXISTS candidates_step ON candidates (step)")

    monkeypatch.setattr(bank_files, "SCHEMA_VERSION", 3)
    monkeypatch.setattr(bank_module, "SCHEMA_VERSION", 3)
    monkeypatch.setitem(bank_files.MIGRATIONS, 2, to_v3)
    bank = SkillBank(path)
    assert calls == [1] and bank.get_meta("schema_version") == "3" and _state(bank) == (40, [1])
    bank.close()
    SkillBank(path).close()
    assert calls == [1]  # once
    monkeypatch.setattr(bank_files, "SCHEMA_VERSION", 4)
    monkeypatch.setattr(bank_module, "SCHEMA_VERSION", 4)
    with pytest.raises(BankError, match="schema version 3 and no migration to 4"):
        SkillBank(path).candidates()


def test_a_lost_bank_next_to_its_snapshots_is_an_error(tmp_path):
    run = tmp_path / "run"
    ckpt = run / "checkpoints" / "checkpoint-3" / "skillduet"
    _filled(run / BANK_FILENAME).snapshot(ckpt)
    (run / BANK_FILENAME).unlink()
    for suffix in ("-wal", "-shm"):
        (run / f"{BANK_FILENAME}{suffix}").unlink(missing_ok=True)
    (run / BANK_FILENAME).write_bytes(b"")  # a 0-byte live bank
    bank = SkillBank(run / BANK_FILENAME)
    with pytest.raises(BankError, match=f"missing or empty, but 1 snapshot.*{ckpt}.*--resume"):
        bank.check_not_lost(run / "checkpoints")
    bank.close()
    (run / BANK_FILENAME).unlink()
    fresh = SkillBank(tmp_path / "new" / BANK_FILENAME)
    fresh.check_not_lost(tmp_path / "new" / "checkpoints")  # no history: a fresh start is fine
    kept = SkillBank(ckpt / BANK_FILENAME)
    kept.check_not_lost(run / "checkpoints")  # an existing bank is never "lost"


@pytest.mark.parametrize("action", [["show"], ["history"], ["export", "--format", "json"],
                                    ["diff", "--from", "1", "--to", "2"]])
def test_skills_cli_answers_one_line_for_a_bad_file(tmp_path, capsys, action):
    path = tmp_path / BANK_FILENAME
    for content in (b"garbage" * 500, b""):
        path.write_bytes(content)
        code = main(["skills", action[0], str(tmp_path), *action[1:]])
        err = capsys.readouterr().err.strip()
        if content:
            assert code == 2 and len(err.splitlines()) == 1 and str(path) in err and "Traceback" not in err
        else:
            assert code in (0, 2) and "Traceback" not in err  # an empty file reads as an empty bank


# The candidates table of schema version 1 (one REAL column per built-in selector), as older releases wrote it.
V1_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE candidates (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    skill_id TEXT NOT NULL, scope TEXT NOT NULL, kind TEXT NOT NULL, text TEXT NOT NULL,
    step INTEGER NOT NULL, source_traj_ids TEXT NOT NULL, metadata TEXT NOT NULL,
    strength REAL, utility REAL, contrast REAL, n_heldout INTEGER, score_note TEXT, scored_step INTEGER,
    created_at REAL NOT NULL,
    UNIQUE (skill_id, step));
CREATE TABLE global_versions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    scope TEXT NOT NULL, version INTEGER NOT NULL, step INTEGER NOT NULL, parent_version INTEGER,
    items TEXT NOT NULL, text TEXT NOT NULL, selector TEXT NOT NULL, report TEXT NOT NULL,
    created_at REAL NOT NULL,
    UNIQUE (scope, version));
CREATE TABLE consolidations (step INTEGER PRIMARY KEY, scopes TEXT NOT NULL, created_at REAL NOT NULL);
INSERT INTO meta VALUES ('schema_version', '1');
INSERT INTO candidates (skill_id, scope, kind, text, step, source_traj_ids, metadata, strength, utility, contrast,
                        n_heldout, score_note, scored_step, created_at)
    VALUES ('a1', 'clean', 'shared', 'Open the drawer first.', 3, '[]', '{}', 0.25, -0.5, NULL, 4, NULL, 3, 0),
           ('b2', 'clean', 'shared', 'Rinse the knife.', 3, '[]', '{}', NULL, NULL, NULL, 0, 'no_heldout', 3, 0);
INSERT INTO global_versions (scope, version, step, parent_version, items, text, selector, report, created_at)
    VALUES ('clean', 1, 3, NULL, '["Open the drawer first."]', '- Open the drawer first.', 'strength', '{}', 0);
INSERT INTO consolidations VALUES (3, '["clean"]', 0);
"""
V1_SCORES = {"a1": {"strength": 0.25, "utility": -0.5, "contrast": None},
             "b2": {"strength": None, "utility": None, "contrast": None}}


def _v1_bank(folder):
    folder.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(folder / BANK_FILENAME))
    conn.executescript(V1_SCHEMA)
    conn.close()
    return folder / BANK_FILENAME


def _scores(bank):
    return {s.skill_id: s.scores for s in bank.candidates()}


def test_a_version_1_bank_is_read_as_it_is_and_migrated_when_opened_for_writing(tmp_path):
    path = _v1_bank(tmp_path / "old")
    reader = SkillBank(path, readonly=True)
    assert _scores(reader) == V1_SCORES and [v.version for v in reader.history()] == [1]
    reader.close()
    assert bank_files.stored_version(sqlite3.connect(str(path))) == 1  # a reader never writes
    bank = SkillBank(path)
    assert bank.get_meta("schema_version") == str(bank_files.SCHEMA_VERSION) and _scores(bank) == V1_SCORES
    columns = {r[1] for r in bank._connect().execute("PRAGMA table_info(candidates)")}
    assert "scores" in columns and not columns & set(bank_files.V1_SCORE_COLUMNS)
    bank.record_scores({"b2": {"strength": 0.125, "utility": 0.0, "contrast": None, "n_heldout": 2}}, step=3)
    assert _scores(bank)["b2"] == {"strength": 0.125, "utility": 0.0, "contrast": None}


def test_a_version_1_snapshot_still_restores(tmp_path):
    snapshot = _v1_bank(tmp_path / "checkpoint-3" / "skillduet")
    bank = _filled(tmp_path / "live" / BANK_FILENAME)
    bank.restore(snapshot.parent)
    assert _scores(bank) == V1_SCORES and [v.version for v in bank.history()] == [1]
    assert bank.get_meta("schema_version") == str(bank_files.SCHEMA_VERSION)
    bank.record_scores({"a1": {"strength": 1.0, "n_heldout": 1}}, step=3)  # the restored bank is writable as v2
    assert _scores(bank)["a1"]["strength"] == 1.0
    bank.close()
    fresh = SkillBank(tmp_path / "fresh" / BANK_FILENAME)  # the damaged-live-bank path replaces the file
    fresh.close()
    (tmp_path / "fresh" / BANK_FILENAME).write_bytes(b"garbage" * 100)
    fresh = SkillBank(tmp_path / "fresh" / BANK_FILENAME)
    fresh.restore(snapshot.parent)
    assert _scores(fresh) == V1_SCORES and fresh.get_meta("schema_version") == str(bank_files.SCHEMA_VERSION)
