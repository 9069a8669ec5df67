"""WebShop text env: page texts, navigation, invalid actions, step limit, contract, goal panel and splits."""

from __future__ import annotations

import json
import time

import pytest

pytest.importorskip("thefuzz")

from webshop_fixtures import run_oracle, tiny_raw_catalogue  # noqa: E402

from skillduet_plugin.envs import check_info, make  # noqa: E402
from skillduet_plugin.envs.webshop import generate_catalogue, make_webshop, write_catalogue  # noqa: E402
from skillduet_plugin.envs.webshop.synthetic import ensure_default_data  # noqa: E402

RUG = "Turquoise Square Area Rug, Easy Clean Shag Rug for Living Room"


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    products, attributes = tiny_raw_catalogue()
    directory = write_catalogue(tmp_path_factory.mktemp("webshop_tiny"), products, attributes)
    (directory / "items_human_ins.json").write_text(json.dumps({"B0RUG00001": [
        {"instruction": "i want a turquoise rug that is easy to clean.", "instruction_attributes": ["easy clean"],
         "instruction_options": ["turquoise"]},
        {"instruction": "a rug", "instruction_attributes": [], "instruction_options": []}]}))
    return directory


@pytest.fixture(scope="module")
def default_dir(tmp_path_factory):
    return ensure_default_data(1000, 0, cache_dir=tmp_path_factory.mktemp("cache"))


@pytest.fixture()
def env(tiny_dir):
    return make("webshop", data_dir=str(tiny_dir), split="test")


def test_start_page_and_contract(env):
    task = env.tasks[0]
    goal = env.goal(task)
    obs, info = env.reset(task)
    assert obs == f"WebShop [SEP] Instruction: [SEP] {goal['instruction_text']} [SEP] Search"
    check_info(info)
    assert info["admissible_actions"] == ["search[<your query>]"]
    assert info["available_actions"] == {"has_search_bar": True, "clickables": ["search"]}
    assert (info["won"], info["score"], info["step"], info["page"]) == (False, 0.0, 0, "index")
    assert info["task_type"] == "webshop" == env.task_type(task)
    assert info["task"] == goal["instruction_text"] == goal["instruction"]
    assert goal["instruction_text"].startswith("Find me easy clean area rugs for living room with color: ")
    assert goal["asin"] == "B0RUG00001" and goal["attributes"] == ["easy clean", "living room"]
    assert goal["price_upper"] in (50.0, 60.0, 70.0)  # two of the four $10 steps above $39.99, the larger


def test_page_texts_follow_the_benchmark(env):
    task = env.tasks[0]
    instruction = env.goal(task)["instruction_text"]
    head = f"Instruction: [SEP] {instruction} [SEP] Back to Search"
    env.reset(task)
    obs, reward, done, info = env.step("search[area rug]")
    assert obs == (f"{head} [SEP] Page 1 (Total results: 2) [SEP] Next > [SEP] B0RUG00001 [SEP] {RUG} [SEP] $39.99"
                   " [SEP] B0RUG00002 [SEP] Modern Runner Rug for Hallway [SEP] $59.0 to $80.0")
    assert info["admissible_actions"] == ["click[back to search]", "click[next >]", "click[b0rug00001]",
                                          "click[b0rug00002]"]
    assert (info["page"], info["keywords"], info["results_page"]) == ("search_results", ["area", "rug"], 1)
    obs, _, _, info = env.step("click[B0RUG00001]")
    assert obs == (f"{head} [SEP] < Prev [SEP] color [SEP] turquoise [SEP] grey [SEP] size [SEP] 5 ft x 7 ft "
                   f"[SEP] 8 ft x 10 ft [SEP] {RUG} [SEP] Price: $39.99 [SEP] Rating: N.A. [SEP] Description "
                   f"[SEP] Features [SEP] Reviews [SEP] Buy Now")
    assert info["admissible_actions"] == [
        "click[back to search]", "click[< prev]", "click[description]", "click[features]", "click[reviews]",
        "click[buy now]", "click[turquoise]", "click[grey]", "click[5 ft x 7 ft]", "click[8 ft x 10 ft]"]
    obs, _, _, info = env.step("click[features]")
    assert obs == f"{head} [SEP] < Prev [SEP] Easy clean shag pile [SEP] Non slip backing"
    assert info["page"] == "item_sub_page" and info["admissible_actions"] == ["click[back to search]",
                                                                              "click[< prev]"]
    env.step("click[< prev]")
    obs, _, _, _ = env.step("click[description]")
    assert obs == f"{head} [SEP] < Prev [SEP] A soft shag area rug that is easy clean."
    env.step("click[< prev]")
    env.step("click[turquoise]")
    obs, reward, done, info = env.step("click[buy now]")
    assert done and info["page"] == "done" and info["admissible_actions"] == []
    assert obs.startswith("Thank you for shopping with us! [SEP] Your code: [SEP] None")
    assert f"[SEP] Your score (min 0.0, max 1.0) [SEP] {reward} [SEP]" in obs
    assert '[SEP] options [SEP] {"color": "turquoise"} [SEP]' in obs


def test_attributes_sub_page_when_shown(tiny_dir):
    env = make_webshop(tiny_dir, show_attrs=True)
    instruction = env.goal("0")["instruction_text"]
    env.reset("0")
    env.step("search[area rug]")
    _, _, _, info = env.step("click[b0rug00001]")
    assert info["admissible_actions"][2:7] == ["click[description]", "click[features]", "click[reviews]",
                                               "click[attributes]", "click[buy now]"]
    obs, _, _, _ = env.step("click[attributes]")
    assert obs == (f"Instruction: [SEP] {instruction} [SEP] Back to Search [SEP] < Prev [SEP] easy clean "
                   f"[SEP] living room [SEP] non slip")


def test_text_rich_marks_buttons_and_clicked_options(tiny_dir):
    env = make_webshop(tiny_dir, split="test", observation_mode="text_rich")
    task = env.tasks[0]
    obs, _ = env.reset(task)
    assert obs.endswith("\n[button] Search [button_]\n") and obs.startswith("WebShop\nInstruction:\n")
    env.step("search[area rug]")
    env.step("click[b0rug00001]")
    env.step("click[grey]")
    obs, _, _, _ = env.step("click[8 ft x 10 ft]")
    lines = obs.split("\n")
    assert lines[:2] == ["You have clicked 8 ft x 10 ft.", "You have clicked grey."]
    assert "  [clicked button] grey [clicked button_]" in lines
    assert "  [button] turquoise [button_]" in lines and "[button] Buy Now [button_]" in lines
    obs, _, _, _ = env.step("click[< prev]")
    assert "\n[clicked button] B0RUG00001 [clicked button_]\n" in obs  # visited product
    assert "\n[button] B0RUG00002 [button_]\n" in obs


SEARCH, OPEN = "search[area rug]", "click[b0rug00001]"


@pytest.mark.parametrize("setup, action", [
    ([SEARCH], "click[nothing here]"), ([SEARCH], "click[search]"), ([SEARCH], "buy now"),
    ([SEARCH], "Click[back to search]"), ([SEARCH], "search[]"), ([SEARCH], ""),
    ([SEARCH], "click[buy now]"),             # no Buy Now on a results page
    ([SEARCH, OPEN], "click[next >]"),        # no Next > on an item page
    ([SEARCH, OPEN], "click[b0rug00002]"),    # product links only on results pages
    ([SEARCH, OPEN], "click[turquoise ]"),    # option values must match exactly
])
def test_invalid_actions_leave_the_page_unchanged(env, setup, action):
    env.reset(env.tasks[0])
    for step in setup:
        before, _, _, info_before = env.step(step)
    obs, reward, done, info = env.step(action)
    assert obs == before and reward == 0 and not done
    for key in ("page", "asin", "options", "keywords", "results_page", "admissible_actions"):
        assert info[key] == info_before[key], key
    assert not info["won"] and info["score"] == 0.0 and info["step"] == len(setup) + 1


def test_buy_is_not_clickable_on_the_search_page(env):
    obs0, _ = env.reset(env.tasks[0])
    obs, reward, done, _ = env.step("click[buy now]")
    assert (obs, reward, done) == (obs0, 0, False)


def test_search_works_from_any_page_and_back_to_search_resets(env):
    env.reset(env.tasks[0])
    env.step("search[area rug]")
    env.step("click[b0rug00001]")
    env.step("click[grey]")
    obs, _, _, info = env.step("search[wireless earbuds]")
    assert info["page"] == "search_results" and info["options"] == {} and "B0HEAD0001" in obs
    obs, _, _, info = env.step("click[back to search]")
    assert info["page"] == "index" and obs.startswith("WebShop [SEP] Instruction:")


def test_paging_and_prev(default_dir):
    env = make_webshop(default_dir, split="test")
    env.reset(env.tasks[0])
    obs1, _, _, info = env.step("search[living room rug]")
    assert "Page 1 (Total results: 50)" in obs1 and "click[< prev]" not in info["admissible_actions"]
    obs2, _, _, info = env.step("click[next >]")
    assert "Page 2 (Total results: 50) [SEP] < Prev [SEP] Next >" in obs2 and info["results_page"] == 2
    asins1 = [a for a in info["admissible_actions"] if a.startswith("click[b0")]
    assert len(asins1) == 10
    obs, _, _, info = env.step("click[< prev]")
    assert obs == obs1
    env.step(info["admissible_actions"][2])  # first product of page 1
    obs, _, _, info = env.step("click[< prev]")  # item page -> back to the same results page
    assert info["page"] == "search_results" and info["results_page"] == 1


def test_step_limit_and_steps_after_done(env):
    env.reset(env.tasks[0])
    for i in range(14):
        _, reward, done, info = env.step("search[area rug]")
        assert not done and info["step"] == i + 1
    obs, reward, done, info = env.step("search[area rug]")
    assert done and reward == 0 and not info["won"] and info["step"] == 15
    again = env.step("click[b0rug00001]")
    assert again[0] == obs and again[1:3] == (0.0, True)


def test_max_steps_is_configurable(tiny_dir):
    env = make_webshop(tiny_dir, max_steps=2)
    env.reset(env.tasks[0])
    assert env.step("search[rug]")[2] is False and env.step("search[rug]")[2] is True


def test_oracle_wins_and_won_means_score_one(env):
    for task in env.tasks:
        score, won, steps = run_oracle(env, task)
        assert (score, won) == (1.0, True) and steps == 5  # search, click, 2 options, buy


def test_scopes(tiny_dir):
    env = make_webshop(tiny_dir, scope="category")
    assert env.task_type(env.tasks[0]) == "garden"
    obs, info = env.reset(env.tasks[0])
    assert info["task_type"] == "garden"
    assert make_webshop(tiny_dir, scope="product_category").task_type("0") == "Home & Kitchen"


def test_human_goals(tiny_dir):
    env = make_webshop(tiny_dir, human_goals=True)
    assert env.tasks == ["0"]  # the instruction without attributes is skipped
    goal = env.goal("0")
    assert goal["goal_options"] == ["turquoise"] and goal["attributes"] == ["easy clean"]
    assert goal["instruction_text"].startswith("i want a turquoise rug that is easy to clean, and price lower than")


def test_bad_arguments_are_named(tiny_dir, tmp_path):
    with pytest.raises(ValueError, match="split='eval' is empty"):
        make_webshop(tiny_dir, split="eval")
    with pytest.raises(ValueError, match="split='dev'"):
        make_webshop(tiny_dir, split="dev")
    with pytest.raises(ValueError, match="observation_mode='html'"):
        make_webshop(tiny_dir, observation_mode="html")
    with pytest.raises(ValueError, match="scope='task'"):
        make_webshop(tiny_dir, scope="task")
    with pytest.raises(FileNotFoundError, match="no product file"):
        make_webshop(tmp_path)
    with pytest.raises(KeyError, match="not in the test split"):
        make_webshop(tiny_dir).reset("9999")
    with pytest.raises(TypeError, match="use_small"):
        make_webshop(tiny_dir, use_small=True)


def test_goal_panel_is_deterministic_with_benchmark_splits(default_dir, monkeypatch, tmp_path):
    test_a = make("webshop", data_dir=str(default_dir), split="test", seed=0)
    test_b = make("webshop", data_dir=str(default_dir), split="test", seed=123)
    assert test_a.tasks == test_b.tasks == [str(i) for i in range(500)]
    assert [test_a.goal(t) for t in test_a.tasks] == [test_b.goal(t) for t in test_b.tasks]
    n_goals = len(test_a.catalogue.goals)
    eval_env, train_env = make_webshop(default_dir, split="eval"), make_webshop(default_dir, split="train")
    assert eval_env.tasks == [str(i) for i in range(500, 1500)]
    assert train_env.tasks == [str(i) for i in range(1500, n_goals)] and n_goals > 2500
    # a fresh generation into another cache dir gives byte-identical files, hence the same panel
    monkeypatch.setenv("SKILLDUET_CACHE", str(tmp_path))
    fresh = make("webshop", split="test")
    assert (fresh.catalogue.goals[:500] == test_a.catalogue.goals[:500])
    [generated] = (tmp_path / "webshop_synthetic").glob("v1-n1000-seed0-*")
    for name in ("items_shuffle_1000.json", "items_ins_v2_1000.json"):
        assert (generated / name).read_bytes() == (default_dir / name).read_bytes()
    assert not list(generated.parent.glob(".tmp-*"))  # atomic writes leave no temporaries


def test_synthetic_catalogue_uses_the_raw_schema():
    products, attributes = generate_catalogue(200, seed=3)
    assert (products, attributes) == generate_catalogue(200, seed=3)
    assert products != generate_catalogue(200, seed=4)[0]
    keys = {"asin", "name", "full_description", "pricing", "images", "product_category", "small_description",
            "customization_options", "category", "query"}
    assert all(keys <= set(p) for p in products)
    assert len({p["asin"] for p in products}) == 200 and all(len(p["asin"]) == 10 for p in products)
    with_instruction = [a for a in attributes.values() if a.get("instruction")]
    assert 0.3 < len(with_instruction) / 200 < 0.55
    assert all(a["instruction"].startswith("Find me ") and a["instruction_attributes"] for a in with_instruction)


def test_steps_are_fast(default_dir):
    env = make_webshop(default_dir, split="test")
    start, steps = time.perf_counter(), 0
    for task in env.tasks[:100]:
        steps += run_oracle(env, task)[2]
    per_step = (time.perf_counter() - start) / steps
    assert per_step < 0.01, f"{per_step * 1000:.2f} ms per step"
