"""Paired WebShop skills of the offline analyzer: the options and attributes the successful episode checked that
the failed one missed, read from hand-made trajectories only (the payload carries no goal)."""

from __future__ import annotations

import pytest
from llm_trajectories import traj

from skillduet_plugin.llm.offline import respond
from skillduet_plugin.llm.offline_webshop import parse_task, requested_attributes

TASK = ("Find me noise cancelling, stereo sound headphones with color: purple, and price lower than 70.00 dollars")
HEAD = f"Instruction: [SEP] {TASK} [SEP] Back to Search"
START = f"WebShop [SEP] Instruction: [SEP] {TASK} [SEP] Search"
RESULTS = (f"{HEAD} [SEP] Page 1 (Total results: 34) [SEP] Next > [SEP] B0KGK7NHH1 [SEP] Luxdex Water Resistant "
           "Wireless Earbuds - Headphones [SEP] $25.49 [SEP] B0DXG1RE5W [SEP] Dexlux Stereo Sound, Noise Cancelling "
           "Wireless Earbuds - Headphones [SEP] $30.95 [SEP] B0Q7VJPTRJ [SEP] Dofi Wireless Earbuds - Headphones "
           "[SEP] $57.95")


def item(title: str, price: str) -> str:
    return (f"{HEAD} [SEP] < Prev [SEP] color [SEP] black [SEP] purple [SEP] {title} [SEP] Price: {price} [SEP] "
            "Rating: N.A. [SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now")


RIGHT = item("Dexlux Stereo Sound, Noise Cancelling Wireless Earbuds - Headphones", "$30.95")
WRONG = item("Luxdex Water Resistant Wireless Earbuds - Headphones", "$25.49")
PLAIN = item("Dofi Wireless Earbuds - Headphones", "$57.95")
PLAIN_FEATURES = (f"{HEAD} [SEP] < Prev [SEP] Noise Cancelling: this earbuds is noise cancelling and built to last. "
                  "[SEP] Stereo Sound: this earbuds is stereo sound and built to last.")
DONE = "Thank you for shopping with us! [SEP] Your score (min 0.0, max 1.0) [SEP] {}"


def _pair(success, failure) -> list[str]:
    out = respond({"kind": "local_pair", "env": "webshop", "task": TASK, "scope": "webshop",
                   "success": success, "failure": failure})
    assert out.startswith("<skill>\n") and out.endswith("\n</skill>")
    return [line[2:] for line in out.splitlines() if line.startswith("- ")]


def _buy(tid, asin, page, options, won, reward, extra=()):
    steps = [("search[noise cancelling stereo sound headphones purple]", RESULTS), (f"click[{asin}]", page),
             *extra, *[(f"click[{o}]", page) for o in options], ("click[buy now]", DONE.format(reward))]
    return traj(tid, TASK, steps, won, reward, initial=START)


def test_requested_attributes_leave_out_options_and_price():
    assert requested_attributes(parse_task(TASK)) == ["noise cancelling", "stereo sound headphones"]
    human = parse_task("i need a long sleeve cotton shirt in navy, size large, and price lower than 40.00 dollars")
    assert requested_attributes(human) == ["long sleeve cotton shirt", "navy"]


def test_same_item_other_option_names_what_the_failure_chose_instead():
    lines = _pair(_buy("s", "b0dxg1re5w", RIGHT, ["purple"], True, 1.0),
                  _buy("f", "b0dxg1re5w", RIGHT, ["black"], False, 0.75))
    assert lines[0] == ("Key decision: select the options the instruction names (purple) before clicking buy now; "
                        "the failed attempt selected black instead.")
    assert not any(line.startswith("Attributes:") for line in lines)  # same item: no attribute difference


def test_other_item_names_the_attributes_its_title_missed():
    lines = _pair(_buy("s", "b0dxg1re5w", RIGHT, ["purple"], True, 1.0),
                  _buy("f", "b0kgk7nhh1", WRONG, ["purple"], False, 0.5))
    assert lines[0] == ("Attributes: the successful attempt's item (b0dxg1re5w) names noise cancelling and stereo "
                        "sound headphones in its title; the failed attempt's item (b0kgk7nhh1) does not: open items "
                        "whose title or features show every requested attribute.")
    assert not any(line.startswith("Key decision") for line in lines)  # both selected purple
    assert not any(line.startswith("Item choice:") for line in lines)  # the attribute line says it better


def test_attributes_the_success_checked_on_the_features_page():
    checked = _buy("s", "b0q7vjptrj", PLAIN, ["purple"], True, 1.0,
                   extra=[("click[features]", PLAIN_FEATURES), ("click[< prev]", PLAIN)])
    lines = _pair(checked, _buy("f", "b0kgk7nhh1", WRONG, ["purple"], False, 0.5))
    assert lines[0].startswith("Attributes: the successful attempt's item (b0q7vjptrj) names noise cancelling "
                               "and stereo sound headphones in its title and features;")
    # negative control: without reading features, the plain title names neither attribute
    unread = _pair(_buy("s", "b0q7vjptrj", PLAIN, ["purple"], True, 1.0),
                   _buy("f", "b0kgk7nhh1", WRONG, ["purple"], False, 0.5))
    assert not any(line.startswith("Attributes:") for line in unread)


def test_a_failure_whose_item_shows_the_attributes_too_gets_no_attribute_line():
    lines = _pair(_buy("s", "b0dxg1re5w", RIGHT, ["purple"], True, 1.0),
                  _buy("f", "b0q7vjptrj", RIGHT.replace("Dexlux", "Dofi"), ["black"], False, 0.67))
    assert lines[0].endswith("the failed attempt selected black instead.")
    assert not any(line.startswith("Attributes:") for line in lines)


@pytest.mark.parametrize("labels", [False, True], ids=["asin-links", "labelled-links"])
def test_pair_from_played_episodes_of_the_synthetic_catalogue(labels):
    """A won episode of the searching shopper against a scripted failure (a lower-ranked item, a wrong size) on
    the same goal: the pair names the options and the attributes the failure missed. With labelled links
    (``click[item k]``, choose mode) the analyzer reads the asin off the page the click was made on: same pair."""
    pytest.importorskip("thefuzz")
    from skillduet_plugin.envs import make

    env = make("webshop", split="train", search_choices=8, result_labels=labels)
    task = env.tasks[3]

    def play(policy):
        obs, info = env.reset(task)
        actions, observations = [], [obs]
        for turn in range(8):
            action = policy(obs, info, turn)
            obs, _, done, info = env.step(action)
            actions.append(action)
            observations.append(obs)
            if done:
                break
        return {"traj_id": str(len(actions)), "task": info["task"], "actions": actions,
                "observations": observations, "won": info["won"], "reward": info["score"]}

    def careless(obs, info, turn):
        admissible = info["admissible_actions"]
        if turn == 1:
            return [a for a in admissible if a.startswith(("click[b0", "click[item "))][2]
        return admissible[-1] if turn in (0, 2) else "click[buy now]"

    success, failure = play(env.searching_expert(task, 0)), play(careless)
    assert success["won"] and not failure["won"]
    out = respond({"kind": "local_pair", "env": "webshop", "task": success["task"], "scope": "webshop",
                   "success": success, "failure": failure})
    lines = [line[2:] for line in out.splitlines() if line.startswith("- ")]
    assert lines[0] == ("Key decision: select the options the instruction names (honey and 24 count) before "
                        "clicking buy now; the failed attempt selected 100 count instead.")
    assert lines[1].startswith("Attributes: the successful attempt's item (b0q5tjrnfi) names low sugar granola & "
                               "nutrition bars, gluten free and low carb in its title and features;")
