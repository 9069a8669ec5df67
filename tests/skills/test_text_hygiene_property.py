"""Property-based: arbitrary text (surrogates, controls, bidi, chat tokens, huge words) from the analyzer and the
synthesizer goes through extraction, scoring, consolidation and prompt building without raising, and every
prompt keeps the chat template's special-token structure."""

from __future__ import annotations

import re
import tempfile
from collections import Counter
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from skillduet_plugin.config import SkillDuetConfig  # noqa: E402
from skillduet_plugin.core.conversation import ChatTokenizer  # noqa: E402
from skillduet_plugin.skills.bank import BANK_FILENAME  # noqa: E402
from skillduet_plugin.skills.lifecycle import SkillLifecycle  # noqa: E402
from skillduet_plugin.skills.sanitize import sanitize_skill  # noqa: E402

from skills_fakes import FakeBackend, length_logprob_fn, make_traj, with_tokens  # noqa: E402

FRAGMENTS = ["\ud800", "\udc00", "\x00", "\x1b[2J", "\x1b]8;;x\x07", "\u202e", "\u2067", "\ufffd", "\r\n", "\x85",
             "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_start|>system\n", "<think>", "</skill>",
             "<skill>", "<global>", "[INST]", "</s>", "- ", "\n", " ", "Open the fridge", "x" * 700,
             "".join(f"w{i}" for i in range(600))]
CHAT_TOKEN = re.compile(r"<\|[^|<>\n]{0,64}\|>|\[/?INST\]|</?s>|<think>")
# every code point, surrogates included (hypothesis leaves them out by default)
ANY_CHAR = st.characters(exclude_categories=())
TEXT = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(ANY_CHAR, max_size=40)), max_size=12).map("".join)


@given(TEXT)
@settings(max_examples=200, deadline=None, derandomize=True)
def test_clean_text_is_printable_utf8_and_idempotent(text):
    from skillduet_plugin.skills.sanitize import clean_text

    out = clean_text(text)
    out.encode("utf-8")
    assert not any(ch in out for ch in "\x00\x1b\u202e\u2067\ufffd\r\x85")
    assert clean_text(out) == out


@given(TEXT)
@settings(max_examples=200, deadline=None, derandomize=True)
def test_sanitized_skill_has_no_chat_tokens(text):
    specials = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]
    clean, reason = sanitize_skill(text, 400, specials)
    assert (clean is None) != (reason is None)
    if clean is not None:
        clean.encode("utf-8")
        assert not any(t in clean for t in specials) and not CHAT_TOKEN.search(clean) and len(clean) <= 400


@pytest.fixture(scope="module")
def chat(tiny_tokenizer):
    return ChatTokenizer(tiny_tokenizer)


def _special_counts(tokenizer, ids) -> Counter:
    special = set(tokenizer.all_special_ids)
    return Counter(i for i in ids if i in special)


@given(analyzer_text=TEXT, synth_text=TEXT)
@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_arbitrary_backend_text_through_the_lifecycle(tiny_tokenizer, chat, analyzer_text, synth_text):
    def analyzer(p):
        return f"<skill>{analyzer_text} Open the fridge before cooling.</skill>"

    def synthesizer(p):
        return f"<global>\n- {synth_text}\n- Keep {synth_text[:30]} the apple cool.\n</global>"

    with tempfile.TemporaryDirectory() as tmp:
        lc = SkillLifecycle(SkillDuetConfig(consolidation_interval=1, skill_token_budget=64,
                                            local_skill_token_budget=48),
                            Path(tmp) / BANK_FILENAME, tokenizer=tiny_tokenizer, analyzer=FakeBackend(analyzer),
                            synthesizer=FakeBackend(synthesizer), similarity=None)
        try:
            trajs = [with_tokens(make_traj(f"1-{k}", "t1", success=k == 0), chat) for k in range(2)]
            result = lc.extract(trajs, 1)
            # every reply becomes a skill or a rejection with its reason: none vanishes unaccounted for (an open
            # '<think>' with no end, for one, swallows the advice after it and is rejected)
            assert len(result.skills) + len(result.rejected) + result.failures >= 1, result
            lc.score(result.skills, trajs, length_logprob_fn)
            lc.end_step(1)
            base = _special_counts(tiny_tokenizer, trajs[0].prompt_ids)
            student = lc.student_messages(trajs[0].prompt_messages, task=trajs[0].task, scope="clean")
            assert _special_counts(tiny_tokenizer, chat.prompt_ids(student)) == base
            for skill in result.skills:
                assert skill.text.strip()
                teacher = lc.teacher_messages(trajs[0].prompt_messages, task=trajs[0].task, scope="clean",
                                              local_skill=skill)
                ids = chat.prompt_ids(teacher)
                assert _special_counts(tiny_tokenizer, ids) == base
                assert ids != chat.prompt_ids(student)  # a stored skill always renders a section
            for text in [s.text for s in lc.bank.candidates()] + [lc.global_for("clean").text]:
                text.encode("utf-8")
        finally:
            lc.close()
