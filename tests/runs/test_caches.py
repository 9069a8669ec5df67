"""Every cache holds only complete, verified artefacts: a tiny model build, a warm start and a game generation
killed with SIGKILL (mid-build, or with every file written but not yet published) are rebuilt by the next run,
never reused; a torn file or an old-style folder without a complete marker is rebuilt; the key changes with
what determines the artefact."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from skillduet_plugin.core.artefacts import MARKER, building, read_marker

CHILD = Path(__file__).with_name("cache_child.py")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread here and in the children, as a run on 2 cores uses (and the warm start key names)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _child(*args: str, env: dict | None = None) -> subprocess.Popen:
    full_env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.Popen([sys.executable, str(CHILD), *args], stdout=subprocess.PIPE, text=True, env=full_env)


def _kill_when(proc: subprocess.Popen, ready, timeout: float = 240.0) -> None:
    """Wait for the child's STARTED line and then for ``ready()``, then SIGKILL it."""
    assert proc.stdout.readline().strip() == "STARTED"
    deadline = time.time() + timeout
    while not ready():
        assert proc.poll() is None, "the child finished before it could be killed"
        assert time.time() < deadline, "the build never reached the point to kill it at"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL


def _leftovers(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if p.name.startswith(".tmp-")]


def test_building_publishes_only_a_finished_folder(tmp_path):
    final = tmp_path / "a"
    with pytest.raises(RuntimeError):
        with building(final, {"k": 1}) as tmp:
            (tmp / "x.bin").write_bytes(b"half")
            raise RuntimeError("crash")
    assert not final.exists() and not _leftovers(tmp_path)
    with building(final, {"k": 1}, {"note": "ok"}) as tmp:
        (tmp / "sub").mkdir()
        (tmp / "sub" / "x.bin").write_bytes(b"whole")
    marker = read_marker(final, {"k": 1})
    assert marker["meta"] == {"note": "ok"} and set(marker["files"]) == {"sub/x.bin"}
    assert read_marker(final, {"k": 2}) is None  # another key is not this artefact
    (final / "sub" / "x.bin").write_bytes(b"whale")  # same size, other bytes: a torn or edited file
    assert read_marker(final, {"k": 1}) is None
    (final / "sub" / "x.bin").write_bytes(b"whole")
    (final / "extra").write_text("?")  # a file the build did not make
    assert read_marker(final, {"k": 1}) is None


def test_a_killed_tiny_build_is_rebuilt(tmp_path):
    from skillduet_plugin.warmstart.tiny_model import build_tiny, tiny_key

    out = tmp_path / "tiny"
    proc = _child("tiny", str(out), "--die-before-publish")
    assert proc.stdout.readline().strip() == "STARTED"
    assert proc.wait() == -signal.SIGKILL  # killed itself with every file written, before publishing
    assert not out.exists() and len(_leftovers(tmp_path)) == 1
    assert build_tiny(out) == out and read_marker(out, tiny_key()) is not None
    assert not _leftovers(tmp_path)  # the dead builder's folder was swept
    assert build_tiny(out) == out and not _leftovers(tmp_path)  # complete: reused as it is

    stranger = tmp_path / "mine"
    stranger.mkdir()
    (stranger / "notes.txt").write_text("not a model")
    with pytest.raises(ValueError, match="out_dir=.*not a tiny build"):
        build_tiny(stranger)


def _warm(tiny_model_dir, cache, steps, log=lambda m: None, **kw):
    from runs_fakes import FAKE_TASKS, FakeAlfworld

    from skillduet_plugin.warmstart.cache import warm_start_model

    tasks = list(FAKE_TASKS)
    return warm_start_model(tiny_model_dir, env_name="alfworld", make_env=lambda n: FakeAlfworld(tasks[:n]),
                            games=2, steps=steps, batch_size=2, learning_rate=1e-3, skill_fraction=0.5,
                            max_turns=6, max_total_tokens=4096, skill_token_budget=64, skill_position="after_task",
                            seed=0, cache_root=cache, env_identity={"fake": 1}, log=log, **kw)


def _weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def _same_weights(a: Path, b: Path) -> bool:
    import torch

    wa, wb = _weights(a), _weights(b)
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.mark.parametrize("how", ["--die-after-checkpoint", "--die-writing-checkpoint"])
def test_a_warm_start_killed_at_a_checkpoint_continues_there_to_the_same_weights(tiny_model_dir, tmp_path, how):
    """SIGKILL once the 3rd cloning checkpoint (step 6 of 9) is saved, or halfway through writing it (the 2nd,
    step 4, must survive whole): the next run plays no expert episode, continues the cloning at that step, and
    publishes the weights of a build that never stopped; what it continued from is then deleted."""
    import torch

    reference, _ = _warm(tiny_model_dir, tmp_path / "ref", 9, checkpoint_steps=0)
    cache = tmp_path / "cache"
    proc = _child("warm", str(cache), str(tiny_model_dir), "9", "--checkpoint-steps", "2", how, "3")
    proc.stdout.read()
    assert proc.wait() == -signal.SIGKILL
    folder = cache / "warmstart"
    [progress] = folder.glob("*.progress")
    assert {"key.json", "expert.json", "clone.pt"} <= {p.name for p in progress.iterdir()}
    kept = 6 if how == "--die-after-checkpoint" else 4
    assert torch.load(progress / "clone.pt", weights_only=True)["step"] == kept
    said: list[str] = []
    out, info = _warm(tiny_model_dir, cache, 9, log=said.append, checkpoint_steps=2)
    assert any("read back" in m for m in said), said  # the expert was not played again
    assert any(f"at step {kept} of 9" in m for m in said), said
    assert info["resumed_from"] == kept and info["steps"] == 9 and not info["cached"]
    assert out.name == reference.name and _same_weights(out, reference)
    assert not progress.exists() and not _leftovers(folder)


def test_a_torn_or_foreign_warm_start_progress_is_not_trusted(tiny_model_dir, tmp_path):
    """A cloning checkpoint that does not read back is ignored (cloning starts over, to the same weights), and a
    progress folder written for another key is discarded."""
    from skillduet_plugin.warmstart.cache import BuildProgress

    reference, _ = _warm(tiny_model_dir, tmp_path / "ref", 5, checkpoint_steps=0)
    cache = tmp_path / "cache"
    proc = _child("warm", str(cache), str(tiny_model_dir), "5", "--checkpoint-steps", "2", "--die-after-checkpoint",
                  "1")
    proc.stdout.read()
    assert proc.wait() == -signal.SIGKILL
    [progress] = (cache / "warmstart").glob("*.progress")
    (progress / "clone.pt").write_bytes(b"not a checkpoint")
    said: list[str] = []
    out, info = _warm(tiny_model_dir, cache, 5, log=said.append, checkpoint_steps=2)
    assert any("ignoring unreadable cloning checkpoint" in m for m in said), said
    assert info["resumed_from"] is None and _same_weights(out, reference)

    foreign = tmp_path / "foreign.progress"
    BuildProgress(foreign, {"a": 1}).save_expert([], [])
    assert BuildProgress(foreign, {"a": 1}).expert() == ([], [])
    assert BuildProgress(foreign, {"a": 2}).expert() is None and not foreign.exists()


def test_a_warm_start_killed_mid_cloning_or_before_publishing_is_rebuilt(tiny_model_dir, tmp_path):
    cache = tmp_path / "cache"
    # 1. SIGKILL from outside while cloning: nothing is published
    proc = _child("warm", str(cache), str(tiny_model_dir), "100000")
    _kill_when(proc, lambda: proc.stdout.readline().strip() == "STARTED")  # the time estimate: 5 steps done
    folder = cache / "warmstart"
    # no model; only what the build did so far (its expert episodes), kept to continue from
    assert [p.suffix for p in folder.iterdir() if not p.name.startswith(".tmp-")] == [".progress"]
    # 2. killed with the model, tokenizer and summary written, right before the rename
    proc = _child("warm", str(cache), str(tiny_model_dir), "3", "--die-before-publish")
    assert proc.stdout.readline().strip() == "STARTED"
    assert proc.wait() == -signal.SIGKILL
    assert [p for p in folder.iterdir() if not p.name.startswith(".tmp-") and p.suffix != ".progress"] == []
    left = _leftovers(folder)
    assert any((p / "model.safetensors").is_file() for p in left)  # the crash left a full-looking folder
    out, info = _warm(tiny_model_dir, cache, 3)
    assert not info["cached"] and info["steps"] == 3 and not _leftovers(folder)
    again, info2 = _warm(tiny_model_dir, cache, 3)
    assert again == out and info2["cached"] and info2["steps"] == 3

    # 3. what the old code left behind (weights and summary, no complete marker) is never reused
    (out / MARKER).unlink()
    _out, info3 = _warm(tiny_model_dir, cache, 3)
    assert not info3["cached"] and read_marker(out) is not None


def test_warm_start_rebuilds_are_identical_and_the_key_is_what_determines_them(tiny_model_dir, tmp_path):
    from skillduet_plugin.warmstart.cache import warm_start_key

    a, _ = _warm(tiny_model_dir, tmp_path / "a", 4)
    b, _ = _warm(tiny_model_dir, tmp_path / "b", 4)
    assert a.name == b.name
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    key = json.loads((a / MARKER).read_text())["key"]
    settings = {k: v for k, v in key.items() if k not in ("artefact", "format", "code", "torch", "threads")}
    assert key == json.loads(json.dumps(warm_start_key(settings), default=str))
    assert {"code", "torch", "threads", "steps", "model", "env_identity", "skill_token_budget"} <= set(key)
    assert "max_minutes" not in key
    c, _ = _warm(tiny_model_dir, tmp_path / "a", 5)  # another budget: another entry beside the first
    assert c != a and read_marker(a) is not None


@pytest.mark.slow
def test_a_game_generation_killed_midway_is_regenerated(tmp_path, monkeypatch):
    pytest.importorskip("alfworld")
    from skillduet_plugin.envs.alfworld import generator

    monkeypatch.setenv("SKILLDUET_CACHE", str(tmp_path))
    env = {"SKILLDUET_CACHE": str(tmp_path)}
    proc = _child("games", env=env)

    def some_game_written() -> bool:
        return any(tmp_path.glob("alfworld_generated-*/json_2.1.1/.tmp-*/**/game.tw-pddl"))

    _kill_when(proc, some_game_written)
    [root] = tmp_path.glob("alfworld_generated-*")
    assert not (root / "json_2.1.1" / "valid_seen").exists()  # the half generation is not the split
    done = _child("games", env=env)
    assert done.stdout.read().split() == ["STARTED", "DONE"] and done.wait() == 0  # regenerated, not reused
    split = root / "json_2.1.1" / "valid_seen"
    assert read_marker(split) is not None and len(list(split.glob("*/*/game.tw-pddl"))) == 6
    assert not _leftovers(root / "json_2.1.1")
    again = _child("games", env=env)
    assert again.stdout.read().split() == ["DONE"] and again.wait() == 0  # complete: reused, no generation
    assert generator.default_data_root().name == root.name


def test_code_digest_ignores_docstrings_and_comments_but_not_code(tmp_path, monkeypatch):
    from skillduet_plugin.core.artefacts import code_digest

    monkeypatch.syspath_prepend(str(tmp_path))
    module = tmp_path / "digest_probe_mod.py"

    def digest(source: str) -> str:
        module.write_text(source)
        code_digest.cache_clear()  # one digest per process otherwise
        return code_digest("digest_probe_mod")

    base = digest('"""Module doc."""\n\n'
                  'def f(x):\n    """Doc."""\n    return x + 1  # one\n\n\nclass C:\n    "c"\n    y = 2\n')
    assert digest('"""Other doc."""\n\n'
                  'def f(x):\n    """New doc."""\n    return x + 1\n\n\nclass C:\n    "d"\n    y = 2\n') == base
    assert digest('def f(x):\n    return x + 1\n\n\nclass C:\n    y = 2\n') == base
    assert digest('"""Module doc."""\n\n'
                  'def f(x):\n    """Doc."""\n    return x + 2\n\n\nclass C:\n    "c"\n    y = 2\n') != base
    assert digest('def f(x):\n    return "x"\n\n\nclass C:\n    y = 2\n') != base  # a string that is code counts
