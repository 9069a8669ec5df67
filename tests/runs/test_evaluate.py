"""Evaluation protocol: neutral text length-matched and content-free, the three conditions insert the same way,
summaries and tables carry hand-checkable numbers, and the panel run is deterministic."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from skillduet_plugin.config import SkillDuetConfig
from skillduet_plugin.envs.prompts import initial_messages
from skillduet_plugin.core.conversation import ChatTokenizer
from skillduet_plugin.runs.evaluate import (GlobalCondition, evaluate_conditions, eval_lifecycle, format_table,
                                            neutral_text, summarize)
from skillduet_plugin.skills.bank import SkillBank
from skillduet_plugin.skills.budget import count_tokens
from runs_fakes import FAKE_TASKS, FakeAlfworld, FakePool

TASKS = list(FAKE_TASKS)
PICK_GLOBAL = "- Take the object first, then go to the target receptacle.\n- Open closed receptacles before use."


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 16, 50, 131, 256])
def test_neutral_text_has_exactly_n_tokens(n, tiny_tokenizer):
    text = neutral_text(n, tiny_tokenizer)
    assert count_tokens(text, tiny_tokenizer) == n
    assert text == neutral_text(n, tiny_tokenizer)  # deterministic
    assert count_tokens(neutral_text(n), None) == n  # whitespace words without a tokenizer


def test_neutral_text_is_content_free(tiny_tokenizer):
    words = set(neutral_text(200, tiny_tokenizer).lower().replace("-", " ").replace(".", " ").split())
    domain = {"take", "go", "open", "put", "object", "receptacle", "fridge", "clean", "heat", "cool", "search",
              "click", "buy", "desklamp", "first", "then"}
    assert not words & domain


@pytest.fixture()
def bank_with_global(tmp_path):
    path = tmp_path / "skill_bank.sqlite"
    bank = SkillBank(path)
    bank.commit_consolidation(3, [{"scope": "pick", "items": PICK_GLOBAL.splitlines(), "text": PICK_GLOBAL,
                                   "selector": "strength", "report": {}}])
    bank.close()
    return path


def _prompt(task_id):
    env = FakeAlfworld()
    obs, info = env.reset(task_id)
    return initial_messages("alfworld", task=info["task"], observation=obs,
                            admissible_actions=info["admissible_actions"]), info


def test_conditions_insert_length_matched_sections(bank_with_global, tiny_tokenizer):
    lifecycle = eval_lifecycle(str(bank_with_global), SkillDuetConfig(skill_token_budget=256), tiny_tokenizer)
    chat = ChatTokenizer(tiny_tokenizer)
    prompt, info = _prompt(TASKS[0])  # a "pick" task
    none = GlobalCondition("none", lifecycle).student_messages(prompt, task=info["task"], scope="pick")
    learned = GlobalCondition("learned", lifecycle).student_messages(prompt, task=info["task"], scope="pick")
    neutral = GlobalCondition("neutral", lifecycle).student_messages(prompt, task=info["task"], scope="pick")
    assert none == prompt
    assert learned == lifecycle.student_messages(prompt, task=info["task"], scope="pick")
    assert PICK_GLOBAL in learned[0]["content"] and PICK_GLOBAL not in neutral[0]["content"]
    n_none, n_learned, n_neutral = (len(chat.prompt_ids(m)) for m in (none, learned, neutral))
    assert n_learned > n_none
    assert n_neutral == n_learned  # same token count in the rendered prompt
    # a scope without a Global gets nothing in either condition
    prompt2, info2 = _prompt(TASKS[1])
    for mode in ("learned", "neutral"):
        assert GlobalCondition(mode, lifecycle).student_messages(prompt2, task=info2["task"], scope="look") == prompt2
    lifecycle.close()


def test_summarize_per_type_and_avg():
    eps = [SimpleNamespace(task_id=f"t{k}", scope=s, won=w, score=float(w), error=None, invalid_actions=i,
                           num_turns=4)
           for k, (s, w, i) in enumerate([("pick", True, 0), ("pick", False, 2), ("pick", True, 0),
                                          ("look", False, 1)])]
    r = summarize(eps, "alfworld")
    assert r["success"] == pytest.approx(0.5)
    assert r["per_type"] == {"look": 0.0, "pick": pytest.approx(2 / 3)}
    assert r["avg"] == pytest.approx((0.0 + 2 / 3) / 2)
    assert r["invalid_action_rate"] == pytest.approx(3 / 16)
    assert r["per_type_n"] == {"look": 1, "pick": 3}
    # per-task results in panel order, for the study's bootstrap intervals
    assert list(r["outcomes"].items()) == [("t0", 1.0), ("t1", 0.0), ("t2", 1.0), ("t3", 0.0)]
    assert r["task_types"] == {"t0": "pick", "t1": "pick", "t2": "pick", "t3": "look"}


def test_format_table_alfworld_and_webshop():
    results = {"conditions": {
        "none": {"success": 0.5, "avg": 0.25, "per_type": {"pick": 0.5, "look": 0.0}, "score": 0.5},
        "learned": {"success": 0.75, "avg": 0.625, "per_type": {"pick": 1.0, "look": 0.25}, "score": 0.8}},
        "skipped": {"neutral": "no learned Global in the skill bank"}, "panel": "valid_unseen", "panel_size": 4}
    table = format_table(results, "alfworld")
    assert "| Global | pick | look | ALL | Avg |" in table
    assert "| None | 50.00 | 0.00 | 50.00 | 25.00 |" in table
    assert "| Learned Global | 100.00 | 25.00 | 75.00 | 62.50 |" in table
    assert "Length-matched neutral: skipped" in table
    web = format_table(results, "webshop")
    assert "| Learned Global | 80.00 | 75.00 |" in web


def test_evaluate_conditions_on_a_tiny_panel(bank_with_global, tiny_model, tiny_tokenizer):
    lifecycle = eval_lifecycle(str(bank_with_global), SkillDuetConfig(skill_token_budget=256), tiny_tokenizer)
    kwargs = dict(env_name="alfworld", max_turns=2, max_new_tokens=6, max_total_tokens=4096,
                  action_selection="generate",
                  log=lambda m: None)
    first = evaluate_conditions(tiny_model, tiny_tokenizer, TASKS, pool=FakePool(), lifecycle=lifecycle, **kwargs)
    again = evaluate_conditions(tiny_model, tiny_tokenizer, TASKS, pool=FakePool(), lifecycle=lifecycle, **kwargs)
    assert set(first["conditions"]) == {"none", "neutral", "learned"} and first["decoding"] == "greedy"
    for mode in first["conditions"]:
        a, b = first["conditions"][mode], again["conditions"][mode]
        assert a["episodes"] == 4 and a["per_type_n"] == {"look": 2, "pick": 2}
        assert (a["success"], a["invalid_action_rate"], a["turns"]) == (b["success"], b["invalid_action_rate"],
                                                                        b["turns"])
    learned = first["conditions"]["learned"]
    assert learned["global_versions"] == {"look": None, "pick": 1}
    assert learned["global_tokens"]["pick"] == count_tokens(PICK_GLOBAL, tiny_tokenizer)
    lifecycle.close()
    # without a bank, only the no-Global condition runs
    bare = evaluate_conditions(tiny_model, tiny_tokenizer, TASKS[:1], pool=FakePool(), lifecycle=None, **kwargs)
    assert set(bare["conditions"]) == {"none"} and set(bare["skipped"]) == {"neutral", "learned"}


def test_summarize_averages_a_task_played_several_times():
    """Sampled evaluation plays each task k times: its outcome and score are the means, by hand."""
    runs = [("t0", "pick", True, 1.0), ("t0", "pick", False, 0.2), ("t0", "pick", True, 1.0),
            ("t0", "pick", False, 0.0), ("t1", "look", False, 0.5), ("t1", "look", False, 0.3),
            ("t1", "look", True, 1.0), ("t1", "look", False, 0.1)]
    eps = [SimpleNamespace(task_id=t, scope=s, won=w, score=sc, error=None, invalid_actions=0, num_turns=3)
           for t, s, w, sc in runs]
    r = summarize(eps, "alfworld")
    assert r["outcomes"] == {"t0": 0.5, "t1": 0.25}
    assert r["scores"] == {"t0": pytest.approx(0.55), "t1": pytest.approx(0.475)}
    assert r["success"] == pytest.approx(3 / 8) and r["per_type"] == {"look": 0.25, "pick": 0.5}
    assert r["episodes"] == 8


def test_sampled_evaluation_is_seeded_and_leaves_the_callers_random_state_alone(tiny_model, tiny_tokenizer):
    import torch

    from skillduet_plugin.runs.evaluate import sampled_episodes

    limits = dict(env_name="alfworld", max_turns=3, max_new_tokens=6, max_total_tokens=4096,
                  action_selection="generate")
    torch.manual_seed(123)
    state = torch.get_rng_state()
    first = sampled_episodes(tiny_model, tiny_tokenizer, TASKS, pool=FakePool(), samples=3, seed=7,
                             temperature=1.0, **limits)
    assert torch.equal(torch.get_rng_state(), state)  # training after the evaluation draws the same numbers
    again = sampled_episodes(tiny_model, tiny_tokenizer, TASKS, pool=FakePool(), samples=3, seed=7,
                             temperature=1.0, **limits)
    other = sampled_episodes(tiny_model, tiny_tokenizer, TASKS, pool=FakePool(), samples=3, seed=8,
                             temperature=1.0, **limits)
    assert [ep.task_id for ep in first] == [t for t in TASKS for _ in range(3)]
    assert [ep.actions for ep in first] == [ep.actions for ep in again]
    assert [ep.actions for ep in first] != [ep.actions for ep in other]  # negative control: the seed matters
    assert len({tuple(ep.actions) for ep in first}) > 1  # sampled, not greedy
    kwargs = dict(limits, log=lambda m: None)
    r = evaluate_conditions(tiny_model, tiny_tokenizer, TASKS, pool=FakePool(), samples=3, seed=7, **kwargs)
    assert r["sampled"]["episodes"] == 3 * len(TASKS) and r["sampled"]["samples"] == 3
    assert "sampled" not in evaluate_conditions(tiny_model, tiny_tokenizer, TASKS[:1], pool=FakePool(), **kwargs)


def test_sampled_evaluation_with_the_learned_global(bank_with_global, tiny_model, tiny_tokenizer, monkeypatch):
    """With the learned Global among the conditions, the policy is also sampled with it (``sampled_learned``, the
    run as deployed): the same seed and samples as ``sampled``, the Global's condition in its prompts. Without it
    (or without a Global in the bank) there is no such measurement."""
    from skillduet_plugin.runs import evaluate

    lifecycle = eval_lifecycle(str(bank_with_global), SkillDuetConfig(skill_token_budget=256), tiny_tokenizer)
    played = []
    real = evaluate.play_panel

    def spy(*args, **kwargs):
        played.append((kwargs["condition"].mode, kwargs.get("do_sample", False), len(args[2])))
        return real(*args, **kwargs)

    seeds = []
    real_seeded = evaluate.seeded_torch_rng

    def seeded_spy(seed):
        seeds.append(seed)
        return real_seeded(seed)

    monkeypatch.setattr(evaluate, "play_panel", spy)
    monkeypatch.setattr(evaluate, "seeded_torch_rng", seeded_spy)
    kwargs = dict(env_name="alfworld", max_turns=2, max_new_tokens=6, max_total_tokens=4096,
                  action_selection="generate",
                  log=lambda m: None, samples=2, seed=3)
    r = evaluate_conditions(tiny_model, tiny_tokenizer, TASKS, pool=FakePool(), lifecycle=lifecycle,
                            conditions=("none", "learned"), **kwargs)
    assert played == [("none", False, 4), ("learned", False, 4), ("none", True, 8), ("learned", True, 8)]
    assert seeds == [3, 3]  # both sampled measurements draw from the generator seeded with the run's seed
    assert r["sampled_learned"]["episodes"] == r["sampled"]["episodes"] == 8
    assert r["sampled_learned"]["samples"] == 2
    played.clear()
    r = evaluate_conditions(tiny_model, tiny_tokenizer, TASKS, pool=FakePool(), lifecycle=lifecycle,
                            conditions=("none",), **kwargs)
    assert "sampled_learned" not in r and played == [("none", False, 4), ("none", True, 8)]
    lifecycle.close()
