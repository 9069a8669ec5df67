"""Fixtures of the run tests: a few generated ALFWorld games for end-to-end ``skillduet train`` runs."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def games(tmp_path_factory):
    """Two train games per type (pick, look) and one valid_unseen game per type, short walkthroughs."""
    from skillduet_plugin.envs.alfworld.generator import generate_games

    root = tmp_path_factory.mktemp("alfworld_games")
    generate_games(root, "train", n_per_type=2, seed=1, task_types=("pick", "look"), max_walkthrough=6)
    generate_games(root, "valid_unseen", n_per_type=1, seed=2, task_types=("pick", "look"), max_walkthrough=6)
    return root
