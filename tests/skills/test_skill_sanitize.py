"""Parsing and sanitising hostile analyzer/synthesizer output."""

from __future__ import annotations

import time

from skillduet_plugin.skills.consolidate import clean_items
from skillduet_plugin.skills.judge import parse_global_answer, parse_skill_answer
from skillduet_plugin.skills.sanitize import (degenerate_reason, sanitize_skill, strip_control_tokens,
                                              tokenizer_special_tokens)


def test_control_tokens_think_blocks_and_role_headers_are_stripped():
    raw = ("<think>secret plan</think><skill><|im_start|>assistant\nOpen the fridge [INST] first,</s> then "
           "<|endoftext|>cool the apple.<|im_end|>\nuser\n<start_of_turn>Check it.</skill>")
    text, reason = sanitize_skill(parse_skill_answer(raw), 500)
    assert reason is None
    for bad in ("<|", "|>", "[INST]", "</s>", "secret", "<start_of_turn>", "\nuser"):
        assert bad not in text
    assert "Open the fridge" in text and "cool the apple." in text and "Check it." in text


def test_tokenizer_special_tokens_are_stripped(tiny_tokenizer):
    specials = tokenizer_special_tokens(tiny_tokenizer)
    assert "<|im_end|>" in specials and "<|endoftext|>" in specials
    assert strip_control_tokens("Do <action> it <|im_start|>now", ["<action>"]) == "Do it now"


def test_huge_answer_is_capped_fast_and_cut_at_a_boundary():
    raw = "<skill>" + "\n".join(" ".join(f"word{i}" for i in range(j, j + 10)) + "." for j in range(0, 20000, 10))
    raw += "</skill>"
    assert len(raw) > 100_000
    start = time.perf_counter()
    text, reason = sanitize_skill(parse_skill_answer(raw), 300)
    assert time.perf_counter() - start < 1.0
    assert reason is None and len(text) <= 300 and text.split()[-1].startswith("word")
    assert not text.endswith("word")  # not cut in the middle of a word


def test_empty_and_degenerate_answers_are_rejected_with_reasons():
    assert sanitize_skill(None, 100) == (None, "backend_failed")
    assert sanitize_skill("", 100) == (None, "empty")
    assert sanitize_skill("<|im_end|><|im_start|>", 100) == (None, "empty")
    assert sanitize_skill("Go left.", 100) == (None, "too_short")
    assert sanitize_skill("1234 5678 !!!! ????", 100) == (None, "no_letters")
    assert sanitize_skill("go " * 200, 2000) == (None, "repetitive")
    assert degenerate_reason("Open the fridge, then take the apple.") is None


def test_skill_answer_without_tags_falls_back_to_whole_text():
    assert parse_skill_answer("<think>hmm</think>  Take the knife first.  ") == "Take the knife first."
    assert parse_skill_answer("x <skill>A</skill> <skill>B</skill>") == "A"
    # a form opened and never closed: its last line was cut at the budget unless it ends a sentence
    assert parse_skill_answer("<skill>unterminated advice") == ""
    assert parse_skill_answer("<skill>Finished advice.") == "Finished advice."


def test_global_answer_parsing_with_and_without_tags():
    assert parse_global_answer("<global>\n- one\n- two\n</global>") == ["one", "two"]
    assert parse_global_answer("Here you go:\n- one\n* two\n3) three") == ["one", "two", "three"]
    assert parse_global_answer("<global>\nplain line\nother\n</global>") == ["plain line", "other"]
    assert parse_global_answer("Sure:\nfirst item\nsecond item") == ["first item", "second item"]
    assert parse_global_answer(None) is None
    assert parse_global_answer("<think>- hidden</think><global>- shown</global>") == ["shown"]


def test_pathological_100kb_answers_are_handled_quickly():
    hostile = ["<|im_start|>" * 9000, "<think>" * 15000, "<skill>" * 15000, "[INST]</s>" * 10000,
               "<skill>" + "<think>a" * 13000 + "</skill>"]
    start = time.perf_counter()
    for raw in hostile:
        assert len(raw) >= 90_000
        text, reason = sanitize_skill(parse_skill_answer(raw), 4000)
        assert text is None and reason in ("empty", "too_short", "repetitive", "no_letters")
        assert clean_items(parse_global_answer(raw), 4000) == []  # a Global gets none of it as an item
    assert time.perf_counter() - start < 2.0
