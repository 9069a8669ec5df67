"""Prompt templates: the task on its own line, admissible actions without ``help``, no skill text."""

from __future__ import annotations

import pytest

from skillduet_plugin.envs.prompts import (
    NEUTRAL_ROLE,
    format_actions,
    format_observation,
    initial_messages,
    step_messages,
    turn_message,
)
from skillduet_plugin.envs.registry import ENVS, register_env

# A real first observation of the engine (valid_unseen, pick_clean_then_place_in_recep).
ALF_OBS = ("-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly around you, "
           "you see a cabinet 2, a cabinet 1, a countertop 1, a fridge 1, and a sinkbasin 1.\n\n"
           "Your task is to: put a clean apple in countertop.")
ALF_ACTIONS = ["go to cabinet 1", "go to countertop 1", "help", "inventory", "look"]
WS_OBS = "WebShop [SEP] Instruction: [SEP] i need a blue rug, and price lower than 40.00 dollars [SEP] Search"
WS_TASK = "i need a blue rug, and price lower than 40.00 dollars"


def test_alfworld_initial_messages():
    msgs = initial_messages("alfworld", task="put a clean apple in countertop.", observation=ALF_OBS,
                            admissible_actions=ALF_ACTIONS)
    assert [m["role"] for m in msgs] == ["user"]
    lines = msgs[0]["content"].split("\n")
    assert lines[0] == "You are an expert agent operating in the ALFRED Embodied Environment."
    assert lines[1] == "Your task is to: put a clean apple in countertop."
    assert lines[2] == ("You are now at step 1 and your current observation is: You are in the middle of a room. "
                        "Looking quickly around you, you see a cabinet 2, a cabinet 1, a countertop 1, a fridge 1, "
                        "and a sinkbasin 1.")
    content = msgs[0]["content"]
    assert content.count("Your task is to:") == 1 and "Welcome to TextWorld" not in content
    assert "'go to cabinet 1',\n 'go to countertop 1',\n 'inventory',\n 'look']." in content
    assert "'help'" not in content and "skill" not in content.lower()
    assert "<think> </think>" in content and "<action> </action>" in content


def test_system_prompt_is_a_separate_message():
    msgs = initial_messages("alfworld", task="t.", observation="o", admissible_actions=["look"],
                            system_prompt="Be brief.")
    assert msgs[0] == {"role": "system", "content": "Be brief."} and msgs[1]["role"] == "user"


def test_turn_message_has_step_observation_and_actions_only():
    text = turn_message("alfworld", observation="Nothing happens.", admissible_actions=ALF_ACTIONS, step=4)
    assert text.startswith("You are now at step 4 and your current observation is: Nothing happens.\n")
    assert "Your task is to" not in text and "'help'" not in text and "'look'" in text
    with pytest.raises(ValueError, match="step=0"):
        turn_message("alfworld", observation="o", admissible_actions=[], step=0)


def test_step_messages_keep_the_last_history_pairs():
    history = [("obs one", "look"), ("obs two", "go to cabinet 1"), ("obs three", "open cabinet 1")]
    (msg,) = step_messages("alfworld", task="put a clean apple in countertop.", history=history,
                           observation="obs four", admissible_actions=ALF_ACTIONS, step=4)
    text = msg["content"]
    assert "Your task is to: put a clean apple in countertop.\n" in text
    assert "already taken 3 step(s)" in text and "most recent 2 observations" in text
    assert ("[Observation 2: 'obs two', Action 2: 'go to cabinet 1'] "
            "[Observation 3: 'obs three', Action 3: 'open cabinet 1']") in text
    assert "obs one" not in text and "You are now at step 4 and your current observation is: obs four" in text
    (none,) = step_messages("alfworld", task="t.", history=history, observation="o", admissible_actions=[],
                            step=4, history_length=0)
    assert "Prior to this step" not in none["content"]
    (first,) = step_messages("alfworld", task="t.", history=[], observation="o", admissible_actions=[], step=1)
    assert "Prior to this step" not in first["content"]


def test_webshop_templates():
    # every page keeps its instruction (the benchmark's pages show it; logo and label dropped)
    assert format_observation("webshop", WS_OBS) == f"{WS_TASK} [SEP] Search"
    assert format_observation("webshop", WS_OBS, task=WS_TASK) == f"{WS_TASK} [SEP] Search"
    page = "Instruction: [SEP] " + WS_TASK + " [SEP] Back to Search [SEP] Page 1 (Total results: 1) [SEP] B0TEST"
    assert format_observation("webshop", page) == (f"{WS_TASK} [SEP] Back to Search [SEP] Page 1 (Total results: 1) "
                                                   f"[SEP] B0TEST")
    assert format_observation("webshop", "Back to Search [SEP] x") == "Back to Search [SEP] x"  # no header
    assert format_actions("webshop", ["search", "back to search", "click[b0test]"]) == (
        "'search[<your query>]',\n 'click[back to search]',\n 'click[b0test]'")
    (msg,) = initial_messages("webshop", task=WS_TASK, observation=WS_OBS,
                              admissible_actions=["search[<your query>]", "click[next >]"])
    lines = msg["content"].split("\n")
    assert lines[0] == "You are an expert autonomous agent operating in the WebShop e-commerce platform."
    assert lines[1] == f"Your task is to: {WS_TASK}"
    assert "search[<your query>]" in msg["content"] and "click[<button>]" in msg["content"]


def test_bad_input_is_named():
    with pytest.raises(KeyError, match="env='babyai' is invalid: registered environments are alfworld, "):
        turn_message("babyai", observation="o", admissible_actions=[], step=1)
    with pytest.raises(ValueError, match="single line"):
        initial_messages("alfworld", task="a\nb", observation="o", admissible_actions=[])
    with pytest.raises(ValueError, match="non-empty"):
        initial_messages("alfworld", task=" ", observation="o", admissible_actions=[])
    with pytest.raises(TypeError, match="list of strings"):
        format_actions("alfworld", "look")


def test_an_env_registered_with_its_factory_alone_gets_the_standard_prompt_with_a_neutral_role():
    """docs/ARCHITECTURE.md: everything but the factory is optional. ``register_env("bare", make_bare)`` prompts
    like ALFWorld's standard prompt, with a role that names no environment."""
    register_env("bare", lambda **kw: None)
    register_env("own_first_prompt", lambda **kw: None, initial_messages=lambda *a, **kw: [])
    try:
        (msg,) = initial_messages("bare", task="switch on the red lamp.", observation=" Three lamps are off. ",
                                  admissible_actions=["switch red", "help"])
        lines = msg["content"].split("\n")
        assert lines[:4] == [NEUTRAL_ROLE, "Your task is to: switch on the red lamp.",
                             "You are now at step 1 and your current observation is: Three lamps are off.",
                             "Your admissible actions of the current situation are: ['switch red']."]
        assert lines[-1].startswith("Now it's your turn") and "<action> </action>" in lines[-1]
        assert turn_message("bare", observation="Wrong lamp.", admissible_actions=["switch red"], step=2) == (
            "You are now at step 2 and your current observation is: Wrong lamp.\n"
            "Your admissible actions of the current situation are: ['switch red'].\n\n" + lines[-1])
        (later,) = step_messages("bare", task="t.", history=[("o1", "switch red")], observation="o2",
                                 admissible_actions=[], step=2)
        assert later["content"].startswith(NEUTRAL_ROLE + "\n")
        # an environment that builds its own first prompt has no standard pieces: still a one-line error
        with pytest.raises(KeyError, match="own_first_prompt.*registers its own initial_messages"):
            turn_message("own_first_prompt", observation="o", admissible_actions=[], step=2)
    finally:
        ENVS.unregister("bare")
        ENVS.unregister("own_first_prompt")
