"""The reply judge on a labelled set of analyzer replies (``data/analyzer_replies.json``: echoes, truncations, the
task said again, talk about the request, copies with small edits, advice, the offline analyzer's replies), on
Global items, and in the lifecycle: rejections counted by reason, shown by ``skillduet skills show`` and the
tracker, and a step whose every reply is rejected leaves its trajectories without a Local skill, visibly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skillduet_plugin.skills import judge
from skillduet_plugin.skills.judge import (COPIED_RATIO, PromptView, copied_ratio, judge_global_items,
                                           judge_skill_reply, line_structure)

DATA = json.loads((Path(__file__).parent / "data" / "analyzer_replies.json").read_text(encoding="utf-8"))
PROMPTS, REPLIES = DATA["prompts"], DATA["replies"]


def _verdict(entry: dict) -> judge.Verdict:
    prompt = PROMPTS[entry["prompt"]]
    return judge_skill_reply(entry["reply"], prompt["text"], task=entry.get("task", prompt["task"]),
                             copies=entry.get("copies", True))


@pytest.mark.parametrize("entry", REPLIES, ids=[e["id"] for e in REPLIES])
def test_each_labelled_reply_gets_its_verdict(entry):
    verdict = _verdict(entry)
    assert (verdict.reason or "accept") == entry["verdict"], verdict.dropped
    if "text" in entry:
        assert verdict.text == entry["text"]


def test_the_labelled_set_covers_every_kind_of_reply():
    verdicts = {e["verdict"] for e in REPLIES}
    assert {"accept", "prompt_structure", "copied_transcript", "task_restated", "chatter", "truncated"} <= verdicts
    assert {e["source"] for e in REPLIES} >= {"smollm2-vllm-run", "smollm2-transformers", "offline", "hand"}


def test_no_accepted_skill_holds_the_prompts_structure_or_a_copied_line():
    for entry in REPLIES:
        verdict = _verdict(entry)
        if verdict.text is None:
            continue
        view = PromptView.of(PROMPTS[entry["prompt"]]["text"], PROMPTS[entry["prompt"]]["task"])
        for line in verdict.text.splitlines():
            assert not line_structure(line), (entry["id"], line)
            if entry.get("copies", True):
                assert copied_ratio(line, view) < COPIED_RATIO, (entry["id"], line)


def test_offline_replies_are_accepted_unchanged():
    from skillduet_plugin.skills.sanitize import sanitize_skill

    offline = [e for e in REPLIES if e["source"] == "offline"]
    assert len(offline) == 3
    for entry in offline:
        body = entry["reply"].split("<skill>", 1)[1].split("</skill>", 1)[0]
        assert _verdict(entry).text == sanitize_skill(body, 4000)[0]


def test_negative_controls_each_rule_does_the_rejecting(monkeypatch):
    by_id = {e["id"]: e for e in REPLIES}
    # without the copy check the reworded observation would be a skill
    copied = by_id["observation-reworded"]
    assert _verdict(dict(copied, copies=False)).text is not None
    monkeypatch.setattr(judge, "COPIED_RATIO", 1.01)
    assert _verdict(copied).text is not None
    monkeypatch.undo()
    # without the task the restated sentence passes; without the chatter rules the talk passes
    assert _verdict(dict(by_id["issue-task-cd"], task="")).reason == "task_restated"  # "The task is ..." itself
    assert judge_skill_reply("Look at cd under the desklamp.", task="look at cd under the desklamp.").text is None
    assert judge_skill_reply("Look at cd under the desklamp.", task="").text == "Look at cd under the desklamp."
    monkeypatch.setattr(judge, "_CHATTER", [])
    assert _verdict(by_id["issue-meta"]).text is not None
    monkeypatch.undo()
    # a form opened and closed is not truncated: the same line is kept
    kept = judge_skill_reply("<skill>\n- Search the sidetables before the lamp\n</skill>").text
    assert kept == "- Search the sidetables before the lamp"


def test_global_items_keep_class_level_advice_only():
    items = ["Open closed receptacles before you search them.",
             "Go to desk 1 and take cd 2 from it.",
             "The task is to look at cd under the desklamp. Take the cd to the lamp before you turn it on.",
             "look at cd under the desklamp",
             "### Skill 3",
             "Check the desk 10 and drawers."]  # "desk 10" is not "desk 1"
    kept, dropped = judge_global_items(items, instance_terms=["desk 1", "cd 2"],
                                       tasks=["look at cd under the desklamp."])
    assert kept == ["Open closed receptacles before you search them.",
                    "Take the cd to the lamp before you turn it on.", "Check the desk 10 and drawers."]
    assert [r for r, _ in dropped] == ["instance_specific", "task_restated", "task_restated", "prompt_structure"]
    # negative control: without the game's ids and task, only the heading goes
    assert len(judge_global_items(items)[0]) == 5


def test_a_local_skill_records_the_games_object_ids_it_names():
    entry = next(e for e in REPLIES if e["id"] == "advice-this-game")
    assert _verdict(entry).instance_terms == ["desklamp 1", "dresser 1", "mug 1", "sidetable 1"]
