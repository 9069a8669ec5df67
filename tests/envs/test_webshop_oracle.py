"""An oracle shopper (search the instruction, open the goal product, pick its options, buy) wins nearly every
test goal: on the default catalogue and on one built around the real ``items_ins_v2_1000`` goal vocabulary."""

from __future__ import annotations

import collections

import pytest

pytest.importorskip("thefuzz")

from webshop_fixtures import load_vocabulary, run_oracle  # noqa: E402

from skillduet_plugin.envs.webshop import generate_catalogue, make_webshop, write_catalogue  # noqa: E402
from skillduet_plugin.envs.webshop.synthetic import ensure_default_data, parse_instruction  # noqa: E402


@pytest.fixture(scope="module")
def vocabulary(shared_data):
    return load_vocabulary(shared_data)


@pytest.fixture(scope="module")
def realistic_dir(vocabulary, tmp_path_factory):
    return write_catalogue(tmp_path_factory.mktemp("webshop_real_vocab"), *generate_catalogue(1000, 0, vocabulary))


def test_vocabulary_instructions_parse(vocabulary):
    with_instruction = [r for r in vocabulary if r.get("instruction")]
    assert len(vocabulary) == 1000 and len(with_instruction) == 415
    queries = [parse_instruction(r["instruction"], r["instruction_attributes"]) for r in with_instruction]
    assert all(queries)
    assert parse_instruction("Find me non slip foot, hand & nail care for dry skin",
                             ["non slip", "dry skin"]) == "foot, hand & nail care"
    assert parse_instruction("Find me women's slippers with faux fur, rubber sole",
                             ["faux fur", "rubber sole"]) == "women's slippers"
    assert len(set(queries)) > 150  # many product types, as in the real catalogue


def test_realistic_catalogue_mirrors_the_vocabulary(realistic_dir, vocabulary):
    env = make_webshop(realistic_dir, split="test")
    products = env.catalogue.products
    assert len(products) == 1000
    assert sum(1 for p in products if p["instruction_text"]) == 415
    # the goals are the real instructions (+ options and price), over the real attribute lists
    real_instructions = {r["instruction"] for r in vocabulary if r.get("instruction")}
    for goal in env.catalogue.goals[:200]:
        instruction = env.catalogue.by_asin[goal["asin"]]["instruction_text"]
        assert instruction in real_instructions and goal["instruction_text"].startswith(instruction)
    assert {p["instruction_text"] for p in products if p["instruction_text"]} == real_instructions
    assert len(env.catalogue.goals) > 1500


def _oracle_rate(env):
    results = [run_oracle(env, task) for task in env.tasks]
    won = sum(1 for _, w, _ in results if w)
    return won / len(results), collections.Counter(round(s, 2) for s, w, _ in results if not w)


def test_oracle_on_realistic_catalogue(realistic_dir):
    env = make_webshop(realistic_dir, split="test")
    rate, failures = _oracle_rate(env)
    assert rate >= 0.95, f"oracle success {rate:.3f}, failed scores {failures}"  # measured: 1.000


def test_oracle_on_default_catalogue(tmp_path_factory):
    env = make_webshop(ensure_default_data(1000, 0, cache_dir=tmp_path_factory.mktemp("cache")), split="test")
    rate, failures = _oracle_rate(env)
    assert rate >= 0.95, f"oracle success {rate:.3f}, failed scores {failures}"  # measured: 1.000


def test_goal_product_ranks_high(realistic_dir):
    """BM25 on the instruction puts the goal product on the first results page for most goals."""
    env = make_webshop(realistic_dir, split="test")
    ranks = []
    for task in env.tasks:
        goal = env.goal(task)
        asins = [p["asin"] for p in env.catalogue.search(goal["instruction_text"])]
        ranks.append(asins.index(goal["asin"]) if goal["asin"] in asins else 50)
    assert sum(r < 10 for r in ranks) / len(ranks) >= 0.9
