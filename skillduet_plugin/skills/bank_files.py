"""Checks that keep a skill-bank file from being misread: schema version and columns, integrity, emptiness.

Every refusal is a :class:`BankError` whose message names the file, what is wrong and what to do about it, so
neither a training run nor ``skillduet skills`` shows a raw ``sqlite3`` traceback for a bad file. Older schema
versions are upgraded by the functions in :data:`MIGRATIONS`; a newer one is refused (an older skillduet
would silently drop what it does not know).
"""

from __future__ import annotations

import json
import sqlite3
from functools import lru_cache
from pathlib import Path
from typing import Callable

SCHEMA_VERSION = 2

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS candidates (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    skill_id TEXT NOT NULL, scope TEXT NOT NULL, kind TEXT NOT NULL, text TEXT NOT NULL,
    step INTEGER NOT NULL, source_traj_ids TEXT NOT NULL, metadata TEXT NOT NULL,
    scores TEXT NOT NULL DEFAULT '{}', n_heldout INTEGER, score_note TEXT, scored_step INTEGER,
    created_at REAL NOT NULL,
    UNIQUE (skill_id, step));
CREATE INDEX IF NOT EXISTS candidates_scope_step ON candidates (scope, step);
CREATE TABLE IF NOT EXISTS global_versions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    scope TEXT NOT NULL, version INTEGER NOT NULL, step INTEGER NOT NULL, parent_version INTEGER,
    items TEXT NOT NULL, text TEXT NOT NULL, selector TEXT NOT NULL, report TEXT NOT NULL,
    created_at REAL NOT NULL,
    UNIQUE (scope, version));
CREATE TABLE IF NOT EXISTS consolidations (step INTEGER PRIMARY KEY, scopes TEXT NOT NULL, created_at REAL NOT NULL);
"""

#: The score columns of schema version 1 (one per built-in selector); version 2 keeps every registered selector's
#: score in the JSON object ``candidates.scores`` (``core.selectors``), so a new selector needs no new column.
V1_SCORE_COLUMNS = ("strength", "utility", "contrast")

#: Columns later versions added: ``{(table, column): version}``; a file of an older version lacks them until it is
#: migrated (a read-only reader reads it as it is).
ADDED_IN = {("candidates", "scores"): 2}


def _v1_scores_to_json(conn: sqlite3.Connection) -> None:
    conn.execute("ALTER TABLE candidates ADD COLUMN scores TEXT NOT NULL DEFAULT '{}'")
    rows = conn.execute(f"SELECT id, {', '.join(V1_SCORE_COLUMNS)} FROM candidates").fetchall()
    conn.executemany("UPDATE candidates SET scores = ? WHERE id = ?",
                     [(json.dumps(dict(zip(V1_SCORE_COLUMNS, r[1:]))), r[0]) for r in rows])
    if sqlite3.sqlite_version_info >= (3, 35, 0):  # DROP COLUMN; older SQLite keeps them, never read again
        for column in V1_SCORE_COLUMNS:
            conn.execute(f"ALTER TABLE candidates DROP COLUMN {column}")


#: ``MIGRATIONS[v](conn)`` upgrades a bank of schema version ``v`` to ``v + 1`` inside one transaction.
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {1: _v1_scores_to_json}

SQLITE_HEADER = b"SQLite format 3\x00"


class BankError(RuntimeError):
    """A skill-bank file that cannot be used as it is; the message names the file and the fix."""


@lru_cache(maxsize=1)
def expected_columns() -> dict[str, tuple[str, ...]]:
    """Column names per table of the current schema."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.executescript(SCHEMA)
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                             "AND name NOT LIKE 'sqlite_%'")]
        return {t: tuple(r[1] for r in conn.execute(f"PRAGMA table_info({t})")) for t in tables}
    finally:
        conn.close()


def schema_problems(conn: sqlite3.Connection, version: int | None = None) -> list[str]:
    """What is missing from ``conn``'s schema (tables, columns) for a bank of ``version`` (default: the current
    one), as readable phrases; [] when complete."""
    problems = []
    for table, columns in expected_columns().items():
        have = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
        if not have:
            problems.append(f"table {table} is missing")
            continue
        missing = [c for c in columns if c not in have and ADDED_IN.get((table, c), 0) <= (version or SCHEMA_VERSION)]
        if missing:
            problems.append(f"table {table} lacks column(s) {', '.join(missing)}")
    return problems


def stored_version(conn: sqlite3.Connection) -> int | None:
    """The bank's schema version (None for a file with no meta table yet)."""
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except sqlite3.OperationalError:
        return None
    if row is None:
        return None
    try:
        return int(row[0])
    except (TypeError, ValueError):
        return -1


def refuse_newer(path: Path, version: int | None) -> None:
    if version is not None and version > SCHEMA_VERSION:
        raise BankError(f"skill bank {path} has schema version {version}, newer than this skillduet reads "
                        f"({SCHEMA_VERSION}): upgrade skillduet to open it (it was written by a newer release; "
                        "this one would misread or drop what it does not know)")
    if version is not None and version < 1:
        raise BankError(f"skill bank {path} has an unreadable schema version: restore it from a checkpoint "
                        "snapshot (<run>/checkpoints/checkpoint-N/skillduet/skill_bank.sqlite)")


def migrate(conn: sqlite3.Connection, path: Path, version: int) -> int:
    """Upgrade an open writable bank from ``version`` to :data:`SCHEMA_VERSION`, one transaction per step."""
    while version < SCHEMA_VERSION:
        step = MIGRATIONS.get(version)
        if step is None:
            raise BankError(f"skill bank {path} has schema version {version} and no migration to "
                            f"{version + 1} exists: open it with the skillduet release that wrote it and export "
                            "it (`skillduet skills export RUN_DIR --format json`)")
        conn.execute("BEGIN IMMEDIATE")
        try:
            step(conn)
            conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)",
                         (str(version + 1),))
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        version += 1
    return version


def corrupt(path: Path, exc: BaseException) -> BankError:
    """The error for a file SQLite cannot read (``file is not a database``, ``disk image is malformed``)."""
    return BankError(f"skill bank {path} is unreadable ({exc}): restore it from a checkpoint snapshot "
                     "(copy <run>/checkpoints/checkpoint-N/skillduet/skill_bank.sqlite over it, or resume with "
                     "`skillduet train --resume RUN_DIR`), or move it away to start a new bank")


def validate_file(path: Path, *, what: str = "skill bank") -> None:
    """Refuse a file that is empty, not SQLite, fails ``PRAGMA integrity_check``, is from a newer schema or
    lacks tables/columns. Reads only (opens the file read-only)."""
    if not path.is_file():
        raise BankError(f"{what} {path} does not exist")
    if path.stat().st_size == 0:
        raise BankError(f"{what} {path} is empty (0 bytes): it holds no bank; use another snapshot "
                        "(an earlier checkpoint) or delete it")
    with open(path, "rb") as fh:
        if fh.read(len(SQLITE_HEADER)) != SQLITE_HEADER:
            raise BankError(f"{what} {path} is not an SQLite file: use another snapshot (an earlier "
                            "checkpoint) or delete it")
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise corrupt(path, exc) from exc
    try:
        result = [r[0] for r in conn.execute("PRAGMA integrity_check").fetchall()]
        if result != ["ok"]:
            raise BankError(f"{what} {path} fails PRAGMA integrity_check ({'; '.join(result[:3])}): it is "
                            "damaged; use another snapshot (an earlier checkpoint)")
        version = stored_version(conn)
        refuse_newer(path, version)
        problems = schema_problems(conn, version)
        if problems:
            raise BankError(f"{what} {path} is not a skill bank of this schema ({'; '.join(problems)}): use a "
                            "bank written by skillduet, or another snapshot")
    except sqlite3.DatabaseError as exc:
        raise corrupt(path, exc) from exc
    finally:
        conn.close()


def row_scores(row: sqlite3.Row) -> dict[str, float | None]:
    """The cached scores of a candidate row, of the current schema or (read-only, unmigrated) of version 1."""
    if "scores" in row.keys():
        return dict(json.loads(row["scores"] or "{}"))
    return {name: row[name] for name in V1_SCORE_COLUMNS}


def snapshots_under(root: Path, filename: str, *, exclude: Path | None = None) -> list[Path]:
    """Non-empty bank files named ``filename`` anywhere under ``root`` (checkpoint snapshots), newest first."""
    if not root.is_dir():
        return []
    found = [p for p in root.rglob(filename) if p.is_file() and p.stat().st_size > 0
             and (exclude is None or p.resolve() != exclude.resolve())]
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)
