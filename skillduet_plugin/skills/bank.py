"""The persistent skill bank of a run: Local candidates with cached scores and every Global version, in SQLite.

One writer (the trainer's main process) and any number of readers (other ranks, ``skillduet skills``) share the
file: WAL journaling lets readers see the last committed state while the writer works, and every write is one
transaction, so a crash leaves the bank as of the last complete call. Global versions are immutable rows.
``snapshot``/``restore`` copy the bank with SQLite's backup API (atomic: a temporary file, then a rename), so a
checkpoint at step k restores exactly the bank of step k. A file is checked when opened (schema version,
columns) and a snapshot before it replaces anything (``integrity_check``, schema, non-empty); a bad file is a
:class:`BankError` naming the file and the fix (``bank_files``). Text is cleaned (``sanitize.clean_text``) on
the way in, so whatever a caller passes, the bank holds valid UTF-8.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

from skillduet_plugin.skills.bank_files import (SCHEMA, SCHEMA_VERSION, BankError, corrupt, migrate, refuse_newer,
                                                schema_problems, snapshots_under, stored_version, validate_file)
from skillduet_plugin.skills.bank_rows import (GlobalVersion, clean, is_corruption, row_to_skill, row_to_version,
                                               step_window)
from skillduet_plugin.skills.types import GlobalSkills, Skill

__all__ = ["BANK_FILENAME", "SCHEMA_VERSION", "BankError", "GlobalVersion", "SkillBank"]

BANK_FILENAME = "skill_bank.sqlite"


class SkillBank:
    """SQLite skill bank at ``path``. ``readonly=True`` never creates or writes the file (non-main processes);
    until the writer has created it, a read-only bank reads as empty."""

    def __init__(self, path: str | os.PathLike, *, readonly: bool = False) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        #: True when this object found no bank (missing or 0-byte file) and starts an empty one
        self.created_fresh = not self.path.exists() or self.path.stat().st_size == 0
        if not readonly:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                self._connect()
            except BankError:
                pass  # a damaged file: every use raises the named error, and restore() can still replace it

    # ------------------------------------------------------------------ connection
    def _connect(self) -> sqlite3.Connection | None:
        if self._conn is not None:
            return self._conn
        if self.readonly and not self.path.exists():
            return None
        existed = self.path.exists() and self.path.stat().st_size > 0
        conn = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None, check_same_thread=False)
        try:
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA busy_timeout=30000")
            version = stored_version(conn) if existed else None
            refuse_newer(self.path, version)
            if self.readonly:
                conn.execute("PRAGMA query_only=ON")
            else:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.executescript(SCHEMA)
                if version is None:
                    conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', ?)",
                                 (str(SCHEMA_VERSION),))
                elif version < SCHEMA_VERSION:
                    migrate(conn, self.path, version)
            # A reader may open the file before the writer made its tables (it then reads as empty).
            # An older file a reader cannot migrate is read as it is (``bank_files.row_scores``).
            problems = schema_problems(conn, version if self.readonly else None) if (
                version is not None or not self.readonly) else []
            if problems:
                raise BankError(f"skill bank {self.path} does not have the schema of version {SCHEMA_VERSION} "
                                f"it claims ({'; '.join(problems)}): restore it from a checkpoint snapshot, or "
                                "move it away to start a new bank")
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise corrupt(self.path, exc) from exc
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        if self.readonly:
            raise PermissionError(f"skill bank {self.path} is opened read-only (write=False): writes are not allowed")
        with self._lock:
            conn = self._connect()
            assert conn is not None
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield conn
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
            except sqlite3.DatabaseError as exc:
                if is_corruption(exc):
                    raise corrupt(self.path, exc) from exc
                raise

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            conn = self._connect()
            if conn is None:
                return []
            try:
                return conn.execute(sql, tuple(params)).fetchall()
            except sqlite3.OperationalError as exc:
                if self.readonly and "no such table" in str(exc):
                    return []  # the writer created the file but not yet the schema
                if is_corruption(exc):
                    raise corrupt(self.path, exc) from exc
                raise
            except sqlite3.DatabaseError as exc:
                if is_corruption(exc):
                    raise corrupt(self.path, exc) from exc
                raise

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    # ------------------------------------------------------------------ meta
    def get_meta(self, key: str, default: str | None = None) -> str | None:
        rows = self._query("SELECT value FROM meta WHERE key = ?", (key,))
        return rows[0]["value"] if rows else default

    def set_meta(self, key: str, value: str) -> None:
        with self._write() as conn:
            conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    # ------------------------------------------------------------------ Local candidates
    def add_candidates(self, skills: Sequence[Skill], step: int) -> int:
        """Store Local candidates made at ``step``; a skill already stored for that step is kept once.
        Returns how many rows were new."""
        now = time.time()
        added = 0
        with self._write() as conn:
            for s in skills:
                cur = conn.execute(
                    "INSERT OR IGNORE INTO candidates (skill_id, scope, kind, text, step, source_traj_ids, "
                    "metadata, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (clean(s.skill_id), clean(s.scope), clean(s.kind), clean(s.text),
                     int(step), json.dumps(list(s.source_traj_ids)),
                     json.dumps(s.metadata or {}, sort_keys=True, default=str), now))
                added += cur.rowcount
        return added

    def record_scores(self, scores: dict[str, dict[str, Any]], step: int | None = None) -> int:
        """Cache selector scores per skill_id on its latest candidate row (or its row of ``step``).

        Each value holds the selector scores by name (float or None; ``SkillScore.as_record``), and may hold
        ``n_heldout``, ``note`` and ``scored_step``. Returns the number of rows updated.
        """
        updated = 0
        with self._write() as conn:
            for skill_id, sc in scores.items():
                where, params = ("skill_id = ? AND step = ?", (skill_id, int(step))) if step is not None else (
                    "id = (SELECT MAX(id) FROM candidates WHERE skill_id = ?)", (skill_id,))
                values = {k: v for k, v in sc.items() if k not in ("n_heldout", "note", "scored_step")}
                cur = conn.execute(
                    f"UPDATE candidates SET scores = ?, n_heldout = ?, score_note = ?, scored_step = ? WHERE {where}",
                    (json.dumps(values, sort_keys=True), sc.get("n_heldout"), sc.get("note"),
                     sc.get("scored_step", step), *params))
                updated += cur.rowcount
        return updated

    def candidates(self, *, scope: str | None = None, since_step: int | None = None,
                   until_step: int | None = None) -> list[Skill]:
        """Candidates (with cached scores in ``Skill.scores``) with ``since_step < step <= until_step``."""
        sql, params = step_window("SELECT * FROM candidates WHERE 1=1", since_step, until_step)
        if scope is not None:
            sql += " AND scope = ?"
            params.append(scope)
        return [row_to_skill(r) for r in self._query(sql + " ORDER BY step, id", params)]

    def last_consolidation_step(self, before_or_at: int | None = None) -> int | None:
        """Step of the latest consolidation (at or before ``before_or_at``), None if there was none."""
        if before_or_at is None:
            rows = self._query("SELECT MAX(step) AS s FROM consolidations")
        else:
            rows = self._query("SELECT MAX(step) AS s FROM consolidations WHERE step <= ?", (int(before_or_at),))
        return rows[0]["s"] if rows and rows[0]["s"] is not None else None

    def recent_candidates(self, scope: str, until_step: int) -> list[Skill]:
        """Candidates of ``scope`` made since the last consolidation before ``until_step``, up to it."""
        last = self.last_consolidation_step(int(until_step) - 1)
        return self.candidates(scope=scope, since_step=last, until_step=until_step)

    def candidate_scopes(self, *, since_step: int | None = None, until_step: int | None = None) -> list[str]:
        sql, params = step_window("SELECT DISTINCT scope FROM candidates WHERE 1=1", since_step, until_step)
        return [r["scope"] for r in self._query(sql + " ORDER BY scope", params)]

    # ------------------------------------------------------------------ Global versions
    def commit_consolidation(self, step: int, versions: Sequence[dict[str, Any]]) -> list[GlobalVersion]:
        """Record a consolidation at ``step`` and its new Global versions in ONE transaction.

        Each entry holds ``scope``, ``items``, ``text``, ``selector`` and ``report``; the version number and
        parent are assigned here (1 for a scope's first Global).
        """
        now = time.time()
        made: list[GlobalVersion] = []
        with self._write() as conn:
            for v in versions:
                row = conn.execute("SELECT MAX(version) AS v FROM global_versions WHERE scope = ?",
                                   (v["scope"],)).fetchone()
                parent = row["v"] if row and row["v"] is not None else None
                gv = GlobalVersion(scope=v["scope"], version=(parent or 0) + 1, step=int(step),
                                   parent_version=parent, items=[clean(i) for i in v["items"]],
                                   text=clean(v["text"]),
                                   selector=v["selector"], report=dict(v.get("report") or {}), created_at=now)
                if "version" in gv.report:  # a consolidation report records the version it became
                    gv.report["version"] = gv.version
                conn.execute(
                    "INSERT INTO global_versions (scope, version, step, parent_version, items, text, selector, "
                    "report, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (gv.scope, gv.version, gv.step, gv.parent_version, json.dumps(gv.items), gv.text,
                     gv.selector, json.dumps(gv.report, sort_keys=True, default=str), now))
                made.append(gv)
            conn.execute("INSERT OR REPLACE INTO consolidations (step, scopes, created_at) VALUES (?, ?, ?)",
                         (int(step), json.dumps([v["scope"] for v in versions]), now))
        return made

    def current_global(self, scope: str) -> GlobalSkills:
        """The latest Global of ``scope`` (version None and empty text before its first consolidation)."""
        rows = self._query("SELECT * FROM global_versions WHERE scope = ? ORDER BY version DESC LIMIT 1", (scope,))
        return row_to_version(rows[0]).as_global() if rows else GlobalSkills(scope=scope, version=None, text="")

    def global_at(self, scope: str, step: int) -> GlobalSkills:
        """The Global of ``scope`` in force after step ``step`` (the latest version made at or before it)."""
        rows = self._query("SELECT * FROM global_versions WHERE scope = ? AND step <= ? ORDER BY version DESC "
                           "LIMIT 1", (scope, int(step)))
        return row_to_version(rows[0]).as_global() if rows else GlobalSkills(scope=scope, version=None, text="")

    def global_version(self, scope: str, version: int) -> GlobalVersion | None:
        rows = self._query("SELECT * FROM global_versions WHERE scope = ? AND version = ?", (scope, int(version)))
        return row_to_version(rows[0]) if rows else None

    def history(self, scope: str | None = None) -> list[GlobalVersion]:
        """Every Global version (of ``scope``), oldest first."""
        if scope is None:
            rows = self._query("SELECT * FROM global_versions ORDER BY step, scope, version")
        else:
            rows = self._query("SELECT * FROM global_versions WHERE scope = ? ORDER BY version", (scope,))
        return [row_to_version(r) for r in rows]

    def scopes(self) -> list[str]:
        """Scopes that have a Global or a candidate."""
        rows = self._query("SELECT scope FROM global_versions UNION SELECT scope FROM candidates ORDER BY scope")
        return [r["scope"] for r in rows]

    # ------------------------------------------------------------------ checkpoints
    def snapshot(self, directory: str | os.PathLike) -> Path:
        """Copy the bank to ``directory/skill_bank.sqlite`` atomically (temporary file, fsync, rename)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        final = directory / BANK_FILENAME
        tmp = directory / f".{BANK_FILENAME}.tmp-{os.getpid()}"
        tmp.unlink(missing_ok=True)
        with self._lock:
            src = self._connect()
            dst = sqlite3.connect(str(tmp))
            try:
                if src is not None:
                    src.backup(dst)
                else:  # a reader before the writer made the file: snapshot an empty bank
                    dst.executescript(SCHEMA)
                dst.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
                dst.commit()
            finally:
                dst.close()
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, final)
        return final

    def restore(self, directory: str | os.PathLike) -> None:
        """Replace the whole bank with the snapshot in ``directory`` (made by :meth:`snapshot`).

        The snapshot is checked first (non-empty, ``integrity_check``, schema); a bad one raises
        :class:`BankError` and the live bank is untouched. The copy is one SQLite transaction (backup API), or,
        when the live file itself is unreadable, an atomic file replacement.
        """
        source = Path(directory)
        if source.is_dir():
            source = source / BANK_FILENAME
        if not source.is_file():
            raise FileNotFoundError(f"no skill bank snapshot at {source}: pass the folder given to snapshot()")
        validate_file(source, what="skill bank snapshot")
        if self.readonly:
            self.close()  # readers just reopen; the writer restores the file itself
            return
        with self._lock:
            try:
                conn = self._connect()
            except BankError:  # the live bank is damaged: swap the file instead of copying into it
                self._replace_file(source)
                conn = self._connect()
            assert conn is not None
            src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
            try:
                src.backup(conn)
                conn.execute("PRAGMA journal_mode=WAL")
                migrate(conn, self.path, stored_version(conn) or SCHEMA_VERSION)  # a snapshot of an older release
            finally:
                src.close()

    def _replace_file(self, source: Path) -> None:
        """Put a copy of ``source`` at :attr:`path` atomically (temporary file, fsync, rename)."""
        self.close()
        tmp = self.path.with_name(f".{self.path.name}.restore-{os.getpid()}")
        shutil.copyfile(source, tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        for suffix in ("-wal", "-shm"):  # a damaged bank's journal must not be replayed onto the snapshot
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)
        os.replace(tmp, self.path)

    def check_not_lost(self, history_root: str | os.PathLike,
                       resume: str = "`skillduet train --resume RUN_DIR`") -> None:
        """Refuse to start a new bank where history exists: this bank was missing or empty when opened, but
        snapshots of it are under ``history_root`` (a run's checkpoints; ``resume``: how the trainer resumes).
        A damaged bank raises its error here, before any work, too."""
        if not self.readonly:
            self._connect()
        if not self.created_fresh:
            return
        found = snapshots_under(Path(history_root), BANK_FILENAME, exclude=self.path)
        if found:
            raise BankError(f"skill bank {self.path} is missing or empty, but {len(found)} snapshot(s) of it exist "
                            f"under {history_root} (newest: {found[0]}): resume with {resume}, or copy that "
                            f"snapshot to {self.path}; to start over, use a new output folder")

    def rollback_to(self, step: int) -> None:
        """Forget everything made after ``step`` (for a resume from a checkpoint that has no snapshot)."""
        with self._write() as conn:
            conn.execute("DELETE FROM candidates WHERE step > ?", (int(step),))
            conn.execute("DELETE FROM global_versions WHERE step > ?", (int(step),))
            conn.execute("DELETE FROM consolidations WHERE step > ?", (int(step),))
