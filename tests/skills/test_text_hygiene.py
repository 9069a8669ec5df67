"""Hostile text from the analyzer, the synthesizer and user files: nothing raises, nothing unprintable is stored
or reaches a prompt, a stored skill always renders, and an empty teacher section is never supervised."""

from __future__ import annotations

import json

import pytest

from skillduet_plugin.config import SkillDuetConfig
from skillduet_plugin.core.conversation import ChatTokenizer
from skillduet_plugin.skills.bank import BANK_FILENAME, SkillBank
from skillduet_plugin.skills.inject import LOCAL_HEADER, skill_section
from skillduet_plugin.skills.lifecycle import SkillLifecycle
from skillduet_plugin.skills.sanitize import sanitize_skill
from skillduet_plugin.skills.trajectory_io import load_trajectories
from skillduet_plugin.skills.types import Skill

from skills_fakes import FakeBackend, default_answer, length_logprob_fn, make_traj, with_tokens

HOSTILE = ["\ud800", "\udfff", "\x00", "\x1b[31m", "\x1b]0;title\x07", "\u202e", "\u2066", "\ufffd", "\x7f",
           "\x85", "\r", "<|im_start|>", "<|im_end|>", "<|endoftext|>"]


def _lifecycle(tmp_path, tokenizer, analyzer, synthesizer, **cfg) -> SkillLifecycle:
    config = SkillDuetConfig(consolidation_interval=1, **cfg)
    return SkillLifecycle(config, tmp_path / BANK_FILENAME, tokenizer=tokenizer, analyzer=analyzer,
                          synthesizer=synthesizer, similarity=None)


def _trajs(chat: ChatTokenizer, step: int = 1) -> list:
    out = []
    for k in range(2):
        out.append(with_tokens(make_traj(f"{step}-{k}", "t1", success=k == 0, step=step), chat))
    return out


def _printable(text: str) -> bool:
    text.encode("utf-8")  # raises on a surrogate
    return not any(h in text for h in HOSTILE)


def test_lone_surrogate_from_the_analyzer_is_stored_clean(tmp_path, tiny_tokenizer):
    # Issue 13 case 1: this answer made SkillBank.add_candidates raise UnicodeEncodeError.
    analyzer = FakeBackend(lambda p: "<skill>Open the fridge \ud800 before you cool the apple.</skill>")
    lc = _lifecycle(tmp_path, tiny_tokenizer, analyzer, FakeBackend())
    chat = ChatTokenizer(tiny_tokenizer)
    result = lc.extract(_trajs(chat), 1)
    assert [s.text for s in result.skills] == ["Open the fridge before you cool the apple."]
    assert [s.text for s in lc.bank.candidates()] == ["Open the fridge before you cool the apple."]


def test_lone_surrogate_from_the_synthesizer_does_not_stop_consolidation(tmp_path, tiny_tokenizer):
    # Issue 13 case 1: a synthesizer item with \udcff made the tokenizer raise TypeError in consolidation.
    def synth(p):
        return "<global>\n- Cool the apple \udcff in the fridge first.\n</global>" if p["kind"] == "synthesize" \
            else default_answer(p)

    lc = _lifecycle(tmp_path, tiny_tokenizer, FakeBackend(), FakeBackend(synth))
    chat = ChatTokenizer(tiny_tokenizer)
    trajs = _trajs(chat)
    result = lc.extract(trajs, 1)
    lc.score(result.skills, trajs, length_logprob_fn)
    reports = lc.end_step(1)
    assert reports and reports[0].items == ["Cool the apple in the fridge first."]
    assert lc.global_for("clean").text == "- Cool the apple in the fridge first."


def test_control_bidi_ansi_and_replacement_characters_never_reach_bank_or_prompt(tmp_path, tiny_tokenizer):
    # Issue 13 case 2: NUL, ESC/ANSI, U+202E and U+FFFD went into the bank and the teacher prompt.
    answer = ("<skill>Open\x00 the \x1b[31mfridge\x1b[0m, then \u202ecool\u202c the \ufffdapple\x07 and "
              "\u2066place\u2069 it.\r\nCheck <|im_end|> twice.</skill>")
    lc = _lifecycle(tmp_path, tiny_tokenizer, FakeBackend(lambda p: answer), FakeBackend())
    chat = ChatTokenizer(tiny_tokenizer)
    trajs = _trajs(chat)
    result = lc.extract(trajs, 1)
    (skill,) = result.skills
    assert skill.text == "Open the fridge, then cool the apple and place it.\nCheck twice."
    stored = lc.bank.candidates()[0].text
    teacher = lc.teacher_messages(trajs[0].prompt_messages, task=trajs[0].task, scope="clean", local_skill=skill)
    for text in (stored, json.dumps(teacher, ensure_ascii=False)):
        assert _printable(text)


def test_a_4000_character_word_still_yields_a_teacher_section(tmp_path, tiny_tokenizer):
    # Issue 13 case 2: the word was stored but the teacher section came out empty.
    word = "".join(f"opencabinet{i}" for i in range(300))[:4000]  # 4,000 characters, no space
    text, reason = sanitize_skill(word, 4000)
    assert reason is None
    section = skill_section(LOCAL_HEADER, text, 16, tiny_tokenizer)
    assert section.startswith(LOCAL_HEADER + "\nopencabinet0")
    from skillduet_plugin.skills.sanitize import MAX_WORD_CHARS

    assert max(len(w) for w in text.split()) <= MAX_WORD_CHARS  # wrapped when stored
    # even a bank row written before the fix (one unbroken word) renders: cut by characters to the budget
    section = skill_section(LOCAL_HEADER, word, 16, tiny_tokenizer)
    assert section.startswith(LOCAL_HEADER + "\nopencabinet")


def test_a_skill_that_renders_to_no_section_is_not_supervised(tiny_tokenizer, tmp_path):
    # Issue 13 case 2: such a row counted as supervised with teacher prompt = student prompt.
    from skillduet_plugin.skills.teacher_plan import plan_teacher
    from skillduet_plugin.skills.types import ExtractionResult

    lc = _lifecycle(tmp_path, tiny_tokenizer, FakeBackend(), FakeBackend())
    chat = ChatTokenizer(tiny_tokenizer)
    trajs = _trajs(chat)
    good = Skill(text="Open the fridge before cooling.", scope="clean", kind="shared")
    empty = Skill(text="<|im_end|>", scope="clean", kind="shared")  # a row written before hygiene existed
    result = ExtractionResult(skills=[good, empty], assignment={trajs[0].traj_id: good.skill_id,
                                                                trajs[1].traj_id: empty.skill_id})
    plan = plan_teacher([t.prompt_ids for t in trajs], [t.completion_ids for t in trajs],
                        list(enumerate(trajs)), result, lc, chat)
    assert plan.has_skill == [True, False]
    assert plan.contexts[1] == trajs[1].prompt_ids


def test_clean_text_contract():
    from skillduet_plugin.skills.sanitize import clean_text

    assert clean_text(b"ok \xff\xfe bytes") == "ok  bytes"
    assert clean_text("pair \ud83d\ude00 kept") == "pair \U0001F600 kept"  # a valid surrogate pair is joined
    assert clean_text("a\tb\nc\r\nd\u2028e") == "a\tb\nc\nd\ne"
    assert clean_text(None) == "" and clean_text(12) == "12"
    once = clean_text("x" * 200 + "\x00\u202e")
    assert once == clean_text(once) and len(once.split()) == 5


def test_user_files_with_invalid_bytes_and_escaped_surrogates(tmp_path):
    t = make_traj("u1", "t1")
    record = json.dumps(t.to_dict()).replace("Welcome.", "Welcome \\ud800\\u0000.")
    path = tmp_path / "t.jsonl"
    path.write_bytes(record.encode() + b"\n" + b"\xff\xfe\n")
    with pytest.raises(ValueError, match="t.jsonl:2"):
        load_trajectories([path])
    path.write_bytes(record.encode() + b"\n")
    (loaded,) = load_trajectories([path])
    assert loaded.prompt_messages[1]["content"].startswith("Welcome .")
    assert sanitize_skill(b"Open the fridge \xff first, please.", 100) == ("Open the fridge first, please.", None)


def test_bank_cleans_whatever_a_caller_passes(tmp_path):
    bank = SkillBank(tmp_path / BANK_FILENAME)
    bank.add_candidates([Skill(text="Raw \ud800 text\x00 here.", scope="s\u202e", kind="shared")], 1)
    bank.commit_consolidation(1, [{"scope": "s", "items": ["it\udfffem"], "text": "- it\udfffem",
                                   "selector": "strength", "report": {}}])
    (c,) = bank.candidates()
    assert c.text == "Raw  text here." and c.scope == "s"
    assert bank.current_global("s").items == ["item"]
