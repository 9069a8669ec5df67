"""Consolidation: dedupe, selector ordering, synthesizer merge and failure, hierarchical compression to budget."""

from __future__ import annotations

import pytest

from skillduet_plugin.skills.budget import count_tokens, truncate_lines
from skillduet_plugin.skills.consolidate import (compress, consolidate_scope, dedupe, render_global, select,
                                                 theme_groups)
from skillduet_plugin.skills.similarity import lexical_similarity
from skillduet_plugin.skills.types import GlobalSkills, Skill

from skills_fakes import FakeBackend


def _cand(text: str, strength: float | None, step: int = 1, utility: float | None = None) -> Skill:
    return Skill(text=text, scope="clean", kind="procedure", step=step,
                 scores={"strength": strength, "utility": utility, "contrast": None})


EMPTY = GlobalSkills(scope="clean", version=None, text="")


def test_exact_duplicates_keep_the_higher_scored_copy():
    low, high = _cand("Open the fridge first.", 0.1, step=1), _cand("open the fridge first", 0.9, step=2)
    assert low.skill_id == high.skill_id  # same fingerprint after normalisation
    unique, rejected = dedupe([low, high], selector="strength", threshold=0.9)
    assert [u.step for u in unique] == [2]
    assert rejected == [{"skill_id": low.skill_id, "reason": "duplicate",
                         "detail": "same text as the step-2 candidate"}]


def test_near_duplicates_by_lexical_similarity():
    a = _cand("Go to the sinkbasin, clean the knife, then put it in the drawer.", 0.2)
    b = _cand("Go to the sinkbasin, clean the knife, then put it in a drawer.", 0.8)
    c = _cand("Heat the potato in the microwave before placing it.", 0.5)
    assert lexical_similarity(a.text, b.text) >= 0.9 > lexical_similarity(a.text, c.text)
    unique, rejected = dedupe([a, b, c], selector="strength", threshold=0.9)
    assert [u.skill_id for u in unique] == [b.skill_id, c.skill_id]
    assert rejected[0]["skill_id"] == a.skill_id and rejected[0]["reason"] == "near_duplicate"
    assert b.skill_id in rejected[0]["detail"]
    # an injected embedding similarity is used instead of the lexical one
    unique, rejected = dedupe([a, b, c], selector="strength", threshold=0.9,
                              similarity=lambda texts: [[1.0] * len(texts) for _ in texts])
    assert [u.skill_id for u in unique] == [b.skill_id] and len(rejected) == 2


def test_strength_selector_keeps_the_top_half_and_random_is_seeded():
    cands = [_cand(f"Distinct advice number {name} about object {name}.", s, utility=None if s is None else -s)
             for name, s in zip("abcdef", (0.6, 0.1, 0.9, None, 0.3, 0.05))]
    kept, rejected = select(cands, selector="strength", keep_ratio=0.5, seed=0, step=10, scope="clean")
    assert [k.scores["strength"] for k in kept] == [0.9, 0.6, 0.3]
    assert [r["reason"] for r in rejected] == ["below_top_k"] * 3
    assert rejected[-1]["detail"].startswith("strength=none")  # unscored ranks last
    kept_u, _ = select(cands, selector="utility", keep_ratio=0.5, seed=0, step=10, scope="clean")
    assert [k.scores["utility"] for k in kept_u] == [-0.05, -0.1, -0.3]
    r1, _ = select(cands, selector="random", keep_ratio=0.5, seed=0, step=10, scope="clean")
    r2, _ = select(list(reversed(cands)), selector="random", keep_ratio=0.5, seed=0, step=10, scope="clean")
    assert [k.skill_id for k in r1] == [k.skill_id for k in r2] and len(r1) == 3
    draws = {tuple(k.skill_id for k in select(cands, selector="random", keep_ratio=0.5, seed=s, step=10,
                                              scope="clean")[0]) for s in range(8)}
    assert len(draws) > 1  # the seed matters


def test_consolidation_merges_kept_skills_and_reports_every_rejection():
    cands = [_cand("Clean the knife at the sinkbasin before the drawer.", 0.9),
             _cand("Clean the knife at the sinkbasin before the drawer!", 0.1),
             _cand("Look in every cabinet before giving up on the search.", 0.5),
             _cand("Never put an object down before it is cleaned.", 0.2)]
    current = GlobalSkills("clean", 3, "- Old advice stays useful.", ["Old advice stays useful."])
    synth = FakeBackend()
    report = consolidate_scope("clean", cands, current, step=20, selector="strength", keep_ratio=0.5,
                               dedupe_threshold=0.9, seed=0, budget_tokens=200, synthesizer=synth)
    sent = synth.batches[0][0].payload
    assert sent["kind"] == "synthesize" and sent["current"] == ["Old advice stays useful."]
    assert sent["new"] == [cands[0].text, cands[2].text] and sent["budget_tokens"] == 200
    assert report.items == ["Old advice stays useful.", cands[0].text, cands[2].text]
    assert report.kept == [cands[0].skill_id, cands[2].skill_id] and report.parent_version == 3
    reasons = {r["skill_id"]: r["reason"] for r in report.rejected}
    assert reasons == {cands[1].skill_id: "near_duplicate", cands[3].skill_id: "below_top_k"}
    assert report.synthesizer_failures == 0 and report.tokens == count_tokens(render_global(report.items))


@pytest.mark.parametrize("answer", [None, "I cannot help with that.:", "<global></global>"])
def test_synthesizer_failure_keeps_current_plus_kept_items(answer):
    cands = [_cand("Take the apple.\nThen cool it in the fridge.", 0.9)]
    current = GlobalSkills("clean", 1, "- Old advice stays useful.", ["Old advice stays useful."])
    synth = FakeBackend(lambda p: answer if p["kind"] == "synthesize" else None)
    report = consolidate_scope("clean", cands, current, step=10, selector="strength", keep_ratio=0.5,
                               dedupe_threshold=0.9, seed=0, budget_tokens=200, synthesizer=synth)
    assert report.items == ["Old advice stays useful.", "Take the apple.; Then cool it in the fridge."]
    assert report.synthesizer_failures == 1 and report.notes[0].startswith("synthesizer_failed")
    assert report.fallback is True


def test_synthesis_and_compression_ask_for_what_their_answer_can_use():
    cands = [_cand(f"Skill number {i}: open the drawer {i} and look inside it carefully.", 0.9 - i / 10)
             for i in range(4)]
    synth = FakeBackend(lambda p: "<global>\n" + "\n".join(f"- {x}" for x in p.get("new", p.get("items", [])))
                        + "\n</global>")
    report = consolidate_scope("clean", cands, EMPTY, step=1, selector="strength", keep_ratio=1.0,
                               dedupe_threshold=0.99, seed=0, budget_tokens=24, synthesizer=synth)
    synthesis = synth.batches[0][0]
    assert synthesis.payload["kind"] == "synthesize" and synthesis.max_tokens == 24 + 32
    compressions = [r for batch in synth.batches[1:] for r in batch]
    assert compressions and all(r.max_tokens == count_tokens(render_global(r.payload["items"])) + 32
                                for r in compressions)
    assert report.fallback is False  # the synthesizer's own merge (negative control of the fallback flag)


def test_compression_fits_the_budget_with_the_tokenizer(tiny_tokenizer):
    items = [f"When cleaning object {i}, go to the sinkbasin first and clean it before placing it." for i in range(12)]
    items += [f"When heating object {i}, use the microwave and then place it." for i in range(12)]
    budget = 60
    assert count_tokens(render_global(items), tiny_tokenizer) > 4 * budget
    backend = FakeBackend()
    out, rounds, dropped, failures = compress(list(items), scope="clean", budget=budget, backend=backend,
                                              tokenizer=tiny_tokenizer)
    assert count_tokens(render_global(out), tiny_tokenizer) <= budget
    assert rounds >= 1 and failures == 0 and out
    assert all(r.payload["kind"] == "compress" and 1 <= r.payload["target_items"] < len(r.payload["items"])
               for batch in backend.batches for r in batch)
    assert any(o.startswith("Merged advice") for o in out)
    # the themes were grouped: cleaning items together, heating items together
    groups = theme_groups(items)
    assert all(len({("clean" in items[i]) for i in g}) == 1 for g in groups)


def test_compression_falls_back_to_dropping_lowest_priority_items_when_the_backend_fails():
    items = [f"Unique advice {w} about {w} objects in rooms." for w in ("apple", "book", "cup", "desk", "egg")]
    out, rounds, dropped, failures = compress(list(items), scope="clean", budget=20,
                                              backend=FakeBackend(lambda p: None))
    assert count_tokens(render_global(out)) <= 20
    assert out == items[: len(out)] and dropped == list(reversed(items[len(out):]))
    assert failures >= 1 and rounds == 1


def test_a_single_overlong_item_is_cut_to_the_budget():
    out, _, dropped, _ = compress(["word " * 100], scope="clean", budget=20, backend=FakeBackend())
    assert count_tokens(render_global(out)) <= 20 and dropped == []


def test_truncate_lines_keeps_whole_lines():
    text = "one two three\nfour five six\nseven"
    assert truncate_lines(text, 6) == ("one two three\nfour five six", 1)
    assert truncate_lines(text, 2) == ("one two", 2)
    assert truncate_lines(text, 100) == (text, 0)
