"""The skill-reading probe's gate (same-game skill minus each control, paired intervals over games), over all
turns and at the deciding turn, with the ceiling a perfect reader could reach; its larger generated panel."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def _games(same: list[int], control: list[int], n: int) -> dict:
    return {f"g{k}": {"none": control, "same_game": same, "other_game": control, "neutral": control}
            for k in range(n)}


def test_gaps_clear_the_gate_only_when_the_same_game_skill_is_20_points_above_every_control():
    from bench.skill_reading import gaps

    reading = gaps(_games([1, 1, 1, 1], [1, 0, 0, 1], 6), n_boot=200)
    assert reading["none"]["points"] == 50.0 and reading["none"]["games"] == 6
    assert reading["gate"] and reading["gate_low"]
    # negative control: a section that changes nothing is 0 points above every control and fails the gate
    ignoring = gaps(_games([1, 0, 1, 0], [1, 0, 1, 0], 6), n_boot=200)
    assert ignoring["neutral"]["points"] == 0.0 and ignoring["neutral"]["ci"] == [0.0, 0.0]
    assert not ignoring["gate"] and not ignoring["gate_low"]


def test_gaps_pair_turns_within_a_game_and_need_every_control():
    from bench.skill_reading import gaps

    per_game = {"a": {"none": [0, 0, 1], "same_game": [1, 1], "neutral": [0, 0]},
                "b": {"none": [0], "same_game": [1], "neutral": [1]}}
    out = gaps(per_game, n_boot=200)
    assert out["none"]["points"] == 100.0  # game a compares its first two turns only
    assert out["neutral"]["points"] == 50.0
    assert out["other_game"] is None and not out["gate"]  # a missing control never passes the gate


def test_deciding_turn_gaps_and_the_ceiling():
    from bench.skill_reading import deciding_turns, gaps

    per_game = {"a": {"none": [1, 0, 1], "same_game": [1, 1, 1], "other_game": [1, 0, 1], "neutral": [1, 0, 1]},
                "b": {"none": [1, 1, 0], "same_game": [1, 1, 1], "other_game": [1, 1, 1], "neutral": [0, 1, 0]},
                "c": {"none": [0], "same_game": [0], "other_game": [0], "neutral": [0]}}
    at = deciding_turns(per_game, {"a": 1, "b": 2, "c": None})
    assert at == {"a": {"none": [0], "same_game": [1], "other_game": [0], "neutral": [0]},
                  "b": {"none": [0], "same_game": [1], "other_game": [1], "neutral": [0]}}
    decided = gaps(at, n_boot=200)
    assert decided["none"]["points"] == 100.0 and decided["none"]["ceiling"] == 100.0
    assert decided["other_game"]["points"] == 50.0 and decided["other_game"]["ceiling"] == 50.0
    assert decided["gate"] is True
    # over all turns the same skill is far less ahead, and a perfect reader could only gain the control's misses
    every = gaps(per_game, n_boot=200)
    assert every["none"]["ceiling"] == round(100 * (1 - (2 / 3 + 2 / 3 + 0) / 3), 1)
    assert every["none"]["points"] < decided["none"]["points"]
    # negative control: a game without a deciding turn is left out, not scored as a miss
    assert "c" not in at


def test_the_panel_can_be_a_larger_generated_split(tmp_path, monkeypatch):
    from bench.skill_reading import panel_env_kwargs
    from skillduet_plugin.runs.config import load_run_config

    config = load_run_config(None, [])
    assert panel_env_kwargs(config, "valid_unseen", 0)["data_dir"] is None
    calls = []
    monkeypatch.setattr("skillduet_plugin.envs.alfworld.generator.ensure_default_data",
                        lambda split, n: calls.append((split, n)) or tmp_path)
    assert panel_env_kwargs(config, "valid_unseen", 10)["data_dir"] == str(tmp_path)
    assert calls == [("valid_unseen", 10)]
