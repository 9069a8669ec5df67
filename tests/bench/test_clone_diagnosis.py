"""bench/clone_diagnosis.py's episode breakdown against hand-counted episodes: the target of each ALFWorld task
phrasing, when the target is in view, taken, and which ``go to`` actions revisit a receptacle."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.clone_diagnosis import episode_behaviour, summarise, target_of  # noqa: E402


@pytest.mark.parametrize("task, target", [
    ("put some book on sidetable.", "book"), ("put a clean butterknife in countertop.", "butterknife"),
    ("put a hot apple in fridge.", "apple"), ("cool some apple and put it in countertop.", "apple"),
    ("look at alarmclock under the desklamp.", "alarmclock"), ("examine the cd with the desklamp.", "cd"),
    ("put two book in desk.", "book"), ("find two pillow and put them in sofa.", "pillow"),
    ("go shopping.", None),
])
def test_target_of_each_task_phrasing(task, target):
    assert target_of(task) == target


def test_episode_breakdown_counts_by_hand():
    # the clone of the transcript: sees the knife twice (turns 1 and 3), takes it once (turn 3: 'butterknife 1'
    # is not a 'knife <n>'), then revisits countertop 2
    observations = ["You are in the middle of a room.",
                    "On the countertop 2, you see a butterknife 1, a knife 2.",
                    "On the countertop 1, you see a cup 1.",
                    "On the countertop 2, you see a butterknife 1, a knife 2.",
                    "You pick up the knife 2 from the countertop 2.",
                    "On the countertop 2, you see a butterknife 1, a knife 1."]
    actions = ["go to countertop 2", "go to countertop 1", "go to countertop 2", "take knife 2 from countertop 2",
               "go to countertop 2", "go to sinkbasin 1"]
    row = episode_behaviour("put a clean knife in drawer.", observations, actions, won=False)
    assert row == {"target": "knife", "won": False, "turns": 6, "ever_seen": True, "took": True, "seen_turns": 2,
                   "taken_in_view": 1, "gotos": 5, "revisits": 2}
    # once held, a knife in view is not a missed chance
    assert episode_behaviour("put a knife in drawer.", ["a knife 1", "a knife 2"], ["take knife 1 from desk 1", "look"],
                             won=True)["seen_turns"] == 1
    never = episode_behaviour("put some book on sidetable.", ["a pen 1"], ["go to desk 1"], won=False)
    assert (never["ever_seen"], never["took"], never["seen_turns"], never["revisits"]) == (False, False, 0, 0)

    summary = summarise([row, never])
    assert summary == {"episodes": 2, "won": 0.0, "target_ever_seen": 0.5, "took_target": 0.5,
                       "take_rate_when_in_view": 0.5, "revisit_share_of_gotos": round(2 / 6, 4),
                       "targets_parsed": 2}
    assert summarise([never])["take_rate_when_in_view"] is None  # nothing in view: no rate, not 0
