"""Action projection: the last <action> tag, format validity, admissibility, the invalid-action penalty."""

from __future__ import annotations

import pytest

from skillduet_plugin.envs.projection import (
    INVALID_ACTION_PENALTY_COEF,
    episode_penalty,
    project_action,
    project_actions,
)

ADMISSIBLE = ["go to desk 1", "look", "take mug 1 from desk 1"]


@pytest.mark.parametrize("text, expected", [
    ("<think>the mug is on the desk</think><action>Go to Desk 1</action>", ("go to desk 1", True)),
    ("<think>x</think> <action>look</action> then <action> go to desk 1 </action>", ("go to desk 1", True)),
    ("<think>\nmulti\nline\n</think>\n<action>\ntake mug 1 from desk 1\n</action>", ("take mug 1 from desk 1", True)),
    ("<action>look</action>", ("look", False)),  # no <think>: sent but flagged
    ("<think>x</think><action>fly away</action>", ("fly away", False)),  # not admissible
    ("<think>我想</think><action>look</action>", ("look", False)),  # CJK
    ("<think>x</think><action></action>", ("ink>x</think><action></action>", False)),  # empty: the tail
    ("I will go to the desk and look around the room now", ("k and look around the room now", False)),
])
def test_alfworld_projection(text, expected):
    assert project_action("alfworld", text, ADMISSIBLE) == expected


def test_options():
    text = "<action>fly away</action>"
    assert project_action("alfworld", text, ADMISSIBLE, require_think=False) == ("fly away", False)
    assert project_action("alfworld", text, ADMISSIBLE, require_think=False, require_admissible=False) == (
        "fly away", True)
    assert project_action("alfworld", "<think>t</think><action>fly away</action>") == ("fly away", True)


def test_webshop_search_is_free_text():
    text = "<think>search first</think><action>search[Blue Rug under 40 dollars]</action>"
    assert project_action("webshop", text, ["search[<your query>]", "click[next >]"]) == (
        "search[blue rug under 40 dollars]", True)


def test_batch_and_penalty():
    actions, valid = project_actions("alfworld", ["<think>a</think><action>look</action>", "nonsense"],
                                     [ADMISSIBLE, ADMISSIBLE])
    assert actions == ["look", "nonsense"] and valid == [True, False]
    assert INVALID_ACTION_PENALTY_COEF == 0.1
    assert episode_penalty([True, False, False, True]) == pytest.approx(-0.2)
    assert episode_penalty([True, True], coef=0.5) == 0.0
    with pytest.raises(ValueError, match="coef"):
        episode_penalty([False], coef=-1)
    with pytest.raises(ValueError, match="admissible"):
        project_actions("alfworld", ["a"], [])
