"""The skill-reading probe's gate (same-game skill minus each control, paired intervals over games) and the
skill-following expert of ``bench/reading_levers.py`` (it also looks for the lamp where the skill says)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

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


def test_lamp_classes_name_where_another_episode_used_the_lamp():
    from bench.reading_levers import lamp_classes

    assert lamp_classes(["go to desk 1", "take pen 1 from desk 1", "go to dresser 2", "use desklamp 1"]) == ("dresser",)
    assert lamp_classes(["go to desk 1", "take pen 1 from desk 1"]) == ()


@pytest.mark.slow
def test_the_skill_following_expert_goes_to_the_lamp_where_the_skill_says(tmp_path):
    pytest.importorskip("alfworld")
    from bench.reading_levers import lamp_classes, play
    from skillduet_plugin.envs import make
    from skillduet_plugin.envs.alfworld.generator import generate_games

    generate_games(tmp_path, "train", n_per_type=3, seed=0)
    env = make("alfworld", data_dir=tmp_path, split="train")
    try:
        looks = [t for t in env.tasks if "look_at_obj_in_light" in t]
        assert looks
        moved = 0
        for task in looks:
            donor = play(env, task, max_turns=30, seed=1)
            lamp = lamp_classes(donor.actions)
            plain = play(env, task, max_turns=30, seed=0, hint=donor.actions)
            full = play(env, task, max_turns=30, seed=0, hint=donor.actions, full=True)
            assert donor.won and plain.won and full.won, (task, donor.actions, full.actions)
            taken = next(k for k, a in enumerate(full.actions) if a.startswith("take "))
            assert full.actions[taken + 1].split()[2] == lamp[0] or full.actions[taken + 1].startswith("use ")
            assert len(full.actions) <= len(plain.actions)
            moved += full.actions != plain.actions
        assert moved > 0  # negative control: without the lamp hint some episodes search for the lamp
    finally:
        env.close()
