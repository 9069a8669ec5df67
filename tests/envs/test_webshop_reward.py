"""WebShop purchase reward: partial credit, colour normalisation, the title heuristic and the recorded purchases."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("thefuzz")

from skillduet_plugin.envs.webshop import get_reward, load_product, normalize_color, title_nouns  # noqa: E402
from skillduet_plugin.envs.webshop.reward import get_option_reward  # noqa: E402
from webshop_fixtures import tiny_raw_catalogue  # noqa: E402

RUG_TITLE = "Turquoise Square Area Rug, Easy Clean Shag Rug for Living Room"


@pytest.fixture()
def products():
    raw, attributes = tiny_raw_catalogue()
    return {p["asin"]: load_product(p, attributes[p["asin"]]) for p in raw}


@pytest.fixture()
def goal():
    return {"asin": "B0RUG00001", "query": "area rugs", "category": "garden", "name": RUG_TITLE,
            "product_category": "Home & Kitchen › Home Décor Products › Area Rugs",
            "attributes": ["easy clean", "living room"], "price_upper": 50.0,
            "goal_options": {"color": "turquoise", "size": "8 ft x 10 ft"},
            "instruction_text": "Find me easy clean area rugs for living room with color: turquoise, and size: "
                                "8 ft x 10 ft, and price lower than 50.00 dollars"}


def test_right_product_and_options_scores_one(goal, products):
    reward, info = get_reward(goal, products["B0RUG00001"], {"color": "turquoise", "size": "8 ft x 10 ft"})
    assert reward == 1.0
    assert info["r_type"] == 1.0 and info["r_att"] == 1.0 and info["r_option"] == 1.0 and info["r_price"] is True
    assert info["w_att"] == pytest.approx(2 / 5) and info["w_option"] == pytest.approx(2 / 5)
    assert info["w_price"] == pytest.approx(1 / 5)


@pytest.mark.parametrize("options, expected", [
    ({"color": "grey", "size": "8 ft x 10 ft"}, (2 + 1 + 1) / 5),   # wrong colour, right size
    ({"color": "turquoise", "size": "5 ft x 7 ft"}, (2 + 1 + 1) / 5),  # size needs an exact match
    ({}, (2 + 0 + 1) / 5),                                           # no option picked
])
def test_wrong_options_lose_their_share(goal, products, options, expected):
    reward, info = get_reward(goal, products["B0RUG00001"], options)
    assert reward == pytest.approx(expected)
    assert info["n_attr_matched"] == 2


def test_over_budget_loses_the_price_share(goal, products):
    goal = {**goal, "price_upper": 30.0}  # the rug costs $39.99
    reward, info = get_reward(goal, products["B0RUG00001"], {"color": "turquoise", "size": "8 ft x 10 ft"})
    assert reward == pytest.approx(4 / 5)
    assert info["r_price"] is False


def test_wrong_product_type_scores_zero(goal, products):
    # headphones share no category level, query or title noun with the rug: title_score 0 -> r_type 0
    reward, info = get_reward(goal, products["B0HEAD0001"], {})
    assert reward == 0.0
    assert info["r_type"] == 0.0 and info["title_score"] == 0.0
    assert not info["query_match"] and not info["category_match"]


def test_weak_type_match_halves_the_reward(goal, products):
    # one shared title noun ("room") out of the goal's 7 -> title_score 1/7 in [0.1, 0.2] -> r_type 0.5
    speaker = {**products["B0HEAD0001"], "name": "Bluetooth Speaker for Room", "Title": "Bluetooth Speaker for Room"}
    reward, info = get_reward(goal, speaker, {})
    assert info["title_score"] == pytest.approx(1 / 7)
    assert info["r_type"] == 0.5
    assert reward == pytest.approx(1 / 5 * 0.5)  # only the price share ($25.50 <= $50)


def test_same_category_distractor_gets_partial_credit(goal, products):
    # same query -> r_type 1; no attribute, the colour "blue | grey" normalises to "blue"; price $59-80 > $50
    runner = products["B0RUG00002"]
    reward, info = get_reward({**goal, "price_upper": 100.0}, runner, {"color": "blue | grey"}, price=60.0)
    assert info["r_type"] == 1.0 and info["r_att"] == 0.0 and info["r_option"] == 0.0
    assert reward == pytest.approx(1 / 5)


def test_attribute_falls_back_to_texts(goal, products):
    goal = {**goal, "attributes": ["shag pile", "waterproof"], "goal_options": {}}
    reward, info = get_reward(goal, products["B0RUG00001"], {})
    assert info["n_attr_matched"] == 1  # "shag pile" is in a feature bullet, "waterproof" nowhere
    assert reward == pytest.approx((1 + 0 + 1) / 3)
    assert "r_option" not in info


def test_raw_and_loaded_products_score_the_same(goal, products):
    raw, attributes = tiny_raw_catalogue()
    rug_raw = {**raw[0], "Attributes": attributes["B0RUG00001"]["attributes"]}
    options = {"color": "turquoise", "size": "5 ft x 7 ft"}
    assert get_reward(goal, rug_raw, options)[0] == get_reward(goal, products["B0RUG00001"], options)[0] == 0.8


def test_extra_option_found_in_texts_counts_as_benchmark_does(goal, products):
    # a human goal naming one option; the purchased "shag" style is in the title, so it counts too
    goal = {**goal, "goal_options": ["turquoise"]}
    reward, _ = get_reward(goal, products["B0RUG00001"], {"color": "turquoise", "style": "shag"})
    assert reward == pytest.approx((2 + 2 + 1) / (2 + 1 + 1))


def test_normalize_color():
    assert normalize_color("black forest") == "black"
    assert normalize_color("violet lavender") == "lavender"  # list order, not position in the string
    assert normalize_color("z2-pink") == "pink"
    assert normalize_color("webshop") == "webshop"


def test_title_nouns_heuristic():
    assert title_nouns(RUG_TITLE) == ["turquoise", "area", "rug", "shag", "rug", "living", "room"]
    assert title_nouns("Portable Waterproof Bluetooth Speaker, 2 Pack") == ["bluetooth", "speaker", "pack"]


def test_invalid_goal_is_rejected(goal, products):
    with pytest.raises(ValueError, match="attributes"):
        get_reward({**goal, "attributes": []}, products["B0RUG00001"], {})


def _recorded_purchases(shared_data):
    for path in sorted((shared_data / "webshop" / "human_trajs").glob("*.jsonl")):
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        done = [r for r in rows if r["page"] == "done"][-1]
        yield path.name, rows[0]["goal"], done


def test_recorded_human_purchases_are_reproduced(shared_data):
    """Rebuild each recorded purchase from its reward details and recompute the recorded reward."""
    checked = 0
    for name, goal, done in _recorded_purchases(shared_data):
        info, content = done["reward_info"], done["content"]
        n_matched = round(info["r_att"] * len(goal["attributes"]))
        # a stand-in product: the matched attributes, the recorded query/category evidence, title nouns only
        product = {"asin": content["asin"], "name": " | ".join(sorted(set(title_nouns(goal["name"])))),
                   "query": goal["query"] if info["query_match"] else "something else",
                   "product_category": goal["product_category"] if info["category_match"] else "Other › Misc",
                   "full_description": "", "small_description": [], "pricing": "",
                   "Attributes": goal["attributes"][:n_matched] or ["DUMMY_ATTR"]}
        reward, ours = get_reward(goal, product, content["options"], price=content["price"])
        assert reward == pytest.approx(done["reward"]), name
        assert set(info) - {"title_score"} <= set(ours), name
        for key in ("r_type", "r_att", "r_option", "r_price", "query_match", "category_match"):
            if key in info:
                assert ours[key] == pytest.approx(info[key]), (name, key)
        checked += 1
    assert checked == 9


def test_recorded_option_matches(shared_data):
    empty = load_product({"asin": "X", "name": "", "query": "", "product_category": ""})
    for name, goal, done in _recorded_purchases(shared_data):
        if "r_option" in done["reward_info"]:
            r_option, _ = get_option_reward(empty, goal["goal_options"], done["content"]["options"])
            assert r_option == done["reward_info"]["r_option"], name
