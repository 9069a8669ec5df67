"""Cache folders that are complete or absent: built in a temporary sibling, verified, fsynced and renamed into
place, so that a build killed at any point (power loss included) is never mistaken for a finished one.

Used by every cache of the product: tiny model builds, generated ALFWorld games, warm-started models. A folder
counts as complete only when its marker file (:data:`MARKER`) is present, names the key the caller asks for,
and lists every file with the size and sha256 it has on disk; anything else is rebuilt. Standard library only,
so that every layer (``envs`` included) may use it.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import importlib.util
import json
import os
import shutil
import socket
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

MARKER = "skillduet_artefact.json"
_TMP_PREFIX = ".tmp-"


def _host() -> str:
    return socket.gethostname().replace("-", "_")


def _tmp_name(name: str) -> str:
    """``.tmp-<pid>@<host>-<random>-<name>``: whose build it is, so that only dead builders' folders are swept."""
    return f"{_TMP_PREFIX}{os.getpid()}@{_host()}-{uuid.uuid4().hex[:8]}-{name}"


def digest_key(key: Mapping[str, Any], length: int = 16) -> str:
    """sha256 (``length`` hex digits) of the sorted JSON of ``key``: the name of a cache entry."""
    payload = json.dumps(dict(key), sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:length]


@functools.lru_cache(maxsize=None)
def code_digest(*modules: str) -> str:
    """A digest of the code of ``modules`` (dotted names) that ignores comments, docstrings and formatting (it
    hashes the parsed syntax tree without docstrings), so that a cache keyed by it is rebuilt when the code that
    made it changes, and not when only its documentation does."""

    h = hashlib.sha256()
    for name in modules:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise ModuleNotFoundError(f"code_digest: module {name!r} not found")
        tree = _without_docstrings(ast.parse(Path(spec.origin).read_text(encoding="utf-8")))
        h.update(name.encode() + b"\0" + ast.dump(tree).encode() + b"\0")
    return h.hexdigest()[:16]


def _without_docstrings(tree: ast.AST) -> ast.AST:
    """``tree`` without the docstring (a leading string constant) of the module and of every class and function
    (``pass`` where it was the whole body)."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                node.body[:1] = [] if len(node.body) > 1 else [ast.Pass()]
    return tree


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MARKER)


def read_marker(folder: str | Path, key: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The marker of a complete, verified artefact folder (its ``meta`` and ``key``), else None.

    Verified: the marker parses, its key equals ``key`` (when given), the folder holds exactly the files it
    lists, each with the listed size and sha256 (a torn or edited file fails).
    """
    folder = Path(folder)
    try:
        marker = json.loads((folder / MARKER).read_text())
        manifest = marker["files"]
        if key is not None and marker.get("key") != json.loads(json.dumps(dict(key), default=str)):
            return None
        present = {str(p.relative_to(folder)) for p in _files(folder)}
        if present != set(manifest):
            return None
        for rel, (size, sha) in manifest.items():
            path = folder / rel
            if path.stat().st_size != size or _file_sha256(path) != sha:
                return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return marker


def _fsync_tree(folder: Path) -> None:
    for path in sorted(folder.rglob("*"), key=lambda p: len(p.parts), reverse=True) + [folder]:
        flags = os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() else 0)
        fd = os.open(path, flags)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_abandoned(parent: str | Path) -> None:
    """Delete temporary build folders under ``parent`` left by processes of this machine that no longer run
    (a killed build); folders of live builders are left alone."""
    parent = Path(parent)
    if not parent.is_dir():
        return
    host = _host()
    for tmp in parent.glob(f"{_TMP_PREFIX}*"):
        owner = tmp.name[len(_TMP_PREFIX):].split("-")[0]
        pid, _, where = owner.partition("@")
        if where != host or not pid.isdigit():
            continue
        if not _pid_alive(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def building(final: str | Path, key: Mapping[str, Any], meta: Mapping[str, Any] | None = None) -> Iterator[Path]:
    """Build an artefact for ``final``: yields an empty temporary folder beside it; when the block ends without
    an exception the folder gets its marker (``key``, ``meta``, every file's size and sha256), is fsynced and
    renamed to ``final``. An exception (or a kill) leaves ``final`` untouched.

    A ``final`` that already exists but is not complete for ``key`` (an interrupted build of an older version,
    a different key) is replaced; if another process published a complete one meanwhile, ours is discarded.
    ``meta`` may be filled in by the block (pass a dict and update it).
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    sweep_abandoned(final.parent)
    tmp = final.parent / _tmp_name(final.name)
    tmp.mkdir()
    try:
        yield tmp
        files = {str(p.relative_to(tmp)): [p.stat().st_size, _file_sha256(p)] for p in _files(tmp)}
        marker = {"key": json.loads(json.dumps(dict(key), default=str)), "meta": dict(meta or {}), "files": files}
        (tmp / MARKER).write_text(json.dumps(marker, indent=1, sort_keys=True))
        _fsync_tree(tmp)
        publish(tmp, final, key)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def replace_file(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Write one file atomically: ``write(tmp)`` fills a temporary sibling, which is fsynced and renamed over
    ``path`` (then the folder is fsynced), so a kill at any point leaves the old file or the new one, whole."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        write(tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    _fsync_dir(path.parent)
    return path


def publish(tmp: Path, final: Path, key: Mapping[str, Any]) -> None:
    """Rename the finished ``tmp`` to ``final`` (replacing an incomplete ``final``), then fsync the parent."""
    for _attempt in range(3):
        try:
            os.rename(tmp, final)
            break
        except OSError:
            if read_marker(final, key) is not None:
                return  # a concurrent builder won: its artefact is identical by construction
            stale = final.parent / _tmp_name("stale-" + final.name)
            with contextlib.suppress(FileNotFoundError):
                os.rename(final, stale)
            shutil.rmtree(stale, ignore_errors=True)
    else:
        raise OSError(f"could not publish {tmp} as {final}")
    _fsync_dir(final.parent)
