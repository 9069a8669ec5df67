"""Fixtures for the environment tests: real ALFWorld splits extracted once per session, small generated games."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest


def _extract(shared_data: Path, dest: Path, split: str) -> Path:
    archive = shared_data / "alfworld" / f"{split}.tar.xz"
    if not archive.is_file():
        pytest.skip(f"{archive} not found (ALFWorld test data)")
    if not (dest / "json_2.1.1" / split).is_dir():
        with tarfile.open(archive) as tar:
            tar.extractall(dest, filter="data")
    return dest


@pytest.fixture(scope="session")
def alfworld_real_data(shared_data, tmp_path_factory) -> Path:
    """A data root holding the official ``valid_unseen`` and ``valid_seen`` games (read-only archives extracted
    into this session's temporary folder, never next to them)."""
    pytest.importorskip("alfworld")
    dest = tmp_path_factory.mktemp("alfworld_real")
    for split in ("valid_unseen", "valid_seen"):
        _extract(shared_data, dest, split)
    return dest


@pytest.fixture(scope="session")
def alfworld_generated(tmp_path_factory) -> Path:
    """A data root with two generated games of each task type (split ``train``, seed 0)."""
    pytest.importorskip("alfworld")
    from skillduet_plugin.envs.alfworld.generator import generate_games

    dest = tmp_path_factory.mktemp("alfworld_generated")
    generate_games(dest, "train", n_per_type=2, seed=0)
    return dest
