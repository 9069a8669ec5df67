"""The reply judge: what of an analyzer's reply is advice, and why the rest is not.

An analyzer reply becomes a Local skill candidate only through :func:`judge_skill_reply` (called by
``skills.extract`` for both adapters). It keeps the reply's lines of advice and leaves out, each with a reason:

- ``prompt_structure``: the prompt's own structure, however short: headings, step numbering (``Step 2:``),
  ``Action:`` / ``Observation:`` / ``Outcome:`` / ``Task:`` lines, the answer-form placeholders, bare labels
  (``Correction skill:``) and the prompt's instructions;
- ``copied_transcript``: a sentence whose word pairs stand in the prompt (observations, the instructions; the
  actions and the task's own words are fair to name) for at least :data:`COPIED_RATIO` of its pairs: a copy
  with small edits still counts (language-model backends only: rule-based ones quote on purpose);
- ``task_restated``: the task sentence said again (``The task is to ...``, or the task's own words);
- ``chatter``: talk about the request, the attempts or the model itself (``I'm glad ...``, ``This is a
  correction skill``, ``The next example was a success``);
- ``truncated``: the last line of a reply cut at its token budget (``<skill>`` opened, never closed).

A reply with no advice left is rejected with the reason most of its lines had; the trajectories it was for get no
Local skill that step (no OPD term), never the echo. :func:`judge_global_items` applies the same rules to the
items of a Global, and drops from them what holds for one game only: its object ids (``desk 1``) and task sentence.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from skillduet_plugin.skills.sanitize import (MAX_ANSWER_CHARS, REJECT_BACKEND_FAILED, REJECT_EMPTY, cap_length,
                                              clean_text, degenerate_reason, strip_control_tokens)

REJECT_STRUCTURE = "prompt_structure"
REJECT_COPIED = "copied_transcript"
REJECT_TASK = "task_restated"
REJECT_CHATTER = "chatter"
REJECT_TRUNCATED = "truncated"
REJECT_INSTANCE = "instance_specific"
#: the order in which a reply's reason is chosen when two reasons dropped as many of its lines
LINE_REASONS = (REJECT_STRUCTURE, REJECT_COPIED, REJECT_TASK, REJECT_CHATTER, REJECT_TRUNCATED)
#: share of a sentence's word pairs found in the prompt at which it counts as copied
COPIED_RATIO = 0.6
#: a sentence within this many words of the task sentence's length, sharing this much of its content words, says
#: the task again
TASK_SLACK_WORDS = 3
TASK_OVERLAP = 0.7

_THINK_BLOCK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL | re.IGNORECASE)
_SKILL_BLOCK = re.compile(r"<skill>(.*?)(</skill>|$)", re.DOTALL | re.IGNORECASE)
_GLOBAL_TAG = re.compile(r"<global>(.*?)(?:</global>|$)", re.DOTALL | re.IGNORECASE)
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")
_WORD = re.compile(r"[a-z0-9]+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
# the rendered transcript (skills.render) and the prompts' headers and instructions
_STRUCTURE = re.compile(
    r"^(?:#{1,6}(?:\s|$)|step\s*\d+\b|(?:initial\s+)?observation\s*:|action\s*:|outcome\s*:|task\s*:"
    r"|your task is to\s*:|reward\s*[:(\d]|=== ?user ?===|\[\.\.\. \d+ middle turn|rules\s*:"
    r"|write the (?:\w+ )?skill(?: set)? now\b|answer with the\b|(?:successful|failed) attempt\s*$"
    r"|(?:current skill set|new skills?|items)\s*$)", re.IGNORECASE)
# the answer-form example ("- (first thing to do or check)") and any line that is only a parenthesis
_PLACEHOLDER = re.compile(r"^\(.{0,80}\)$")
# a bare label: a few words and a colon ("Correction skill:", "Steps:")
_LABEL = re.compile(r"^[\w ,'/-]{1,40}:$")
_TASK_SAID = re.compile(r"^(?:the|your|my|our|this) (?:task|goal|objective|mission) (?:is|was|will be)\b",
                        re.IGNORECASE)
_CHATTER = [
    re.compile(r"^(?:sure|certainly|of course|okay|ok|great|absolutely|here is|here's|here are)\b", re.IGNORECASE),
    re.compile(r"\b(?:I|I'm|I'll|I've|I'd)\b|\b(?i:me|my|myself)\b"),
    re.compile(r"\b(?:glad|excited|happy to|hope this|feel free|let me know)\b", re.IGNORECASE),
    re.compile(r"\bthis is an? (?:\w+ )?(?:skill|correction|procedure|answer|example|response)\b", re.IGNORECASE),
    re.compile(r"^(?:the |a |my |our )?(?:\w+ )?(?:skill|error|mistake|answer|solution|output|response|result)"
               r" (?:is|was|would be)\s*:", re.IGNORECASE),
    re.compile(r"\b(?:should not|do not|don't|never) copy\b|\bnot to copy\b", re.IGNORECASE),
    re.compile(r"\b(?:previous|next|above|following|first|second|last|this|that) examples?\b", re.IGNORECASE),
]
# an object of one game: a name and its number ("desk 1", "cd 2")
_OBJECT_ID = re.compile(r"\b[a-z]+ \d{1,3}(?![\w-])")
_STOPWORDS = frozenset("a an the some any to of in on at for from with into onto and or is are be it its this that "
                       "then there your you".split())


@dataclass
class Verdict:
    """The judge's decision on one reply.

    Attributes:
        text: the advice kept, sanitised; None when the reply was rejected.
        reason: why it was rejected (None when accepted).
        dropped: ``(reason, text)`` of every line or sentence left out of ``text``.
        instance_terms: this game's object ids that ``text`` names (a Global must not carry them).
    """

    text: str | None
    reason: str | None = None
    dropped: list[tuple[str, str]] = field(default_factory=list)
    instance_terms: list[str] = field(default_factory=list)


@dataclass
class PromptView:
    """What the judge compares a reply with: the prompt's word pairs (its action lines left out) and the task."""

    pairs: frozenset[tuple[str, str]] = frozenset()
    task: str = ""
    objects: frozenset[str] = frozenset()

    @classmethod
    def of(cls, messages: Sequence[dict] | str | None, task: str = "") -> "PromptView":
        text = messages if isinstance(messages, str) or messages is None else "\n".join(
            str(m.get("content", "")) for m in messages)
        lines = [ln for ln in (text or "").splitlines() if not re.match(r"^\s*Step \d+\. Action:", ln)]
        words = _WORD.findall(" \n ".join(lines).lower())
        task_words = _words(task)
        # the task's own words are fair to name (restating it is judged on its own)
        pairs = set(zip(words, words[1:])) - set(zip(task_words, task_words[1:]))
        return cls(frozenset(pairs), task, frozenset(_OBJECT_ID.findall((text or "").lower())))


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _content(words: Iterable[str]) -> set[str]:
    return {w for w in words if w not in _STOPWORDS}


def restates_task(sentence: str, task: str) -> bool:
    """True when ``sentence`` says the task (``The task is to ...``, or the task sentence's own words)."""
    body = _BULLET.sub("", sentence).strip()
    if _TASK_SAID.match(body):
        return True
    words, task_words = _words(body), _words(task)
    if not task_words or len(words) > len(task_words) + TASK_SLACK_WORDS:
        return False
    a, b = _content(words), _content(task_words)
    return bool(a and b) and 2 * len(a & b) / (len(a) + len(b)) >= TASK_OVERLAP


def copied_ratio(sentence: str, view: PromptView) -> float:
    """Share of the sentence's word pairs that stand in the prompt (0 for sentences under three words)."""
    words = _words(sentence)
    pairs = list(zip(words, words[1:]))
    if len(pairs) < 2:
        return 0.0
    return sum(p in view.pairs for p in pairs) / len(pairs)


def line_structure(line: str) -> bool:
    """True for a line of the prompt's structure (heading, step numbering, transcript field, placeholder, label)."""
    body = _BULLET.sub("", line).strip()
    return bool(_STRUCTURE.match(line.strip()) or _STRUCTURE.match(body) or _PLACEHOLDER.match(body)
                or _LABEL.match(body))


def sentence_reason(sentence: str, view: PromptView, *, copies: bool) -> str | None:
    """Why one sentence is not advice (None: it is)."""
    if line_structure(sentence):
        return REJECT_STRUCTURE
    if restates_task(sentence, view.task):
        return REJECT_TASK
    if any(p.search(sentence) for p in _CHATTER):
        return REJECT_CHATTER
    if copies and copied_ratio(sentence, view) >= COPIED_RATIO:
        return REJECT_COPIED
    return None


def judge_line(line: str, view: PromptView, *, copies: bool) -> tuple[str | None, list[tuple[str, str]]]:
    """``(kept line or None, dropped (reason, text))``: a line of structure goes whole; otherwise each sentence
    is judged and the line keeps its advice sentences (unchanged when all are advice)."""
    if line_structure(line):
        return None, [(REJECT_STRUCTURE, line.strip())]
    prefix = _BULLET.match(line)
    body = line[prefix.end():] if prefix else line.strip()
    sentences = [s for s in _SENTENCE_END.split(body.strip()) if s.strip()]
    verdicts = [(s, sentence_reason(s, view, copies=copies)) for s in sentences]
    dropped = [(r, s) for s, r in verdicts if r is not None]
    if not dropped:
        return line.rstrip(), []
    kept = [s for s, r in verdicts if r is None]
    if not kept:
        return None, dropped
    return (prefix.group(0) if prefix else "") + " ".join(kept), dropped


def skill_region(answer: str) -> tuple[str, bool]:
    """``(text, cut)``: the first non-empty ``<skill>`` block of a cleaned answer (the whole answer without tags);
    ``cut`` is True when a block was opened and never closed (the reply ended inside the form)."""
    for match in _SKILL_BLOCK.finditer(answer):
        if match.group(1).strip():
            return match.group(1), not match.group(2)
    return (answer, False) if "<skill>" not in answer.lower() else ("", False)


def _distinct(lines: Iterable[str]) -> list[str]:
    """Lines in order, each once; lines that differ only in their numbers (``Look at desk 1`` / ``Look at desk
    2``: a list of this game's objects, not advice) count as one."""
    out, seen = [], set()
    for line in lines:
        key = " ".join(re.sub(r"\d+", "#", line.lower()).split())
        if key and key not in seen:
            seen.add(key)
            out.append(line.rstrip())
    return out


def advice_lines(answer: str, view: PromptView, *, copies: bool = True,
                 special_tokens: Sequence[str] = ()) -> tuple[list[str], list[tuple[str, str]], bool]:
    """``(kept lines, dropped (reason, text), had content)`` of a reply: the region of its ``<skill>`` form,
    without control tokens, each line once, judged line by line."""
    body = _THINK_BLOCK.sub(" ", clean_text(answer[:MAX_ANSWER_CHARS], wrap=False))
    region, cut = skill_region(body)
    lines = _distinct(strip_control_tokens(region, special_tokens).splitlines())
    kept: list[str] = []
    dropped: list[tuple[str, str]] = []
    for line in lines:
        line_kept, line_dropped = judge_line(line, view, copies=copies)
        dropped.extend(line_dropped)
        if line_kept is not None:
            kept.append(line_kept)
    if cut and kept and not re.search(r"[.!?)\"']\s*$", kept[-1]):
        dropped.append((REJECT_TRUNCATED, kept.pop().strip()))
    return kept, dropped, bool(lines)


def _main_reason(dropped: Sequence[tuple[str, str]]) -> str:
    counts = Counter(r for r, _ in dropped)
    return max(LINE_REASONS, key=lambda r: (counts[r], -LINE_REASONS.index(r)))


def judge_skill_reply(answer: str | None, messages: Sequence[dict] | str | None = None, *, task: str = "",
                      max_chars: int = 4000, special_tokens: Sequence[str] = (),
                      copies: bool = True) -> Verdict:
    """The verdict on one analyzer reply to the request ``messages`` (chat messages or their text) about
    ``task``. ``copies``: check for text copied from the prompt (False for rule-based backends, which quote
    trajectories on purpose)."""
    if answer is None:
        return Verdict(None, REJECT_BACKEND_FAILED)
    view = PromptView.of(messages, task)
    kept, dropped, had = advice_lines(answer, view, copies=copies, special_tokens=special_tokens)
    if not kept:
        return Verdict(None, _main_reason(dropped) if dropped else REJECT_EMPTY, dropped)
    text = cap_length("\n".join(kept).strip(), max_chars)
    reason = degenerate_reason(text)
    if reason is not None:
        return Verdict(None, reason, dropped)
    terms = sorted(t for t in set(_OBJECT_ID.findall(text.lower())) if t in view.objects)
    return Verdict(text, None, dropped, terms)


def parse_skill_answer(answer: str | None, prompt: str | None = None, *, task: str = "") -> str | None:
    """The advice lines of an analyzer answer as text ("" when none; None when the backend failed), unsanitised;
    with ``prompt``, sentences copied from it are left out too."""
    if answer is None:
        return None
    kept, _, _ = advice_lines(answer, PromptView.of(prompt, task), copies=prompt is not None)
    return "\n".join(kept).strip()


def parse_global_answer(answer: str | None) -> list[str] | None:
    """The items of a synthesizer/compress answer: ``- item`` lines inside ``<global>...</global>``.

    Without tags, bullet lines of the whole answer; without bullets, non-empty lines. Headings, transcript lines
    and placeholders are never items. None when the backend failed; an empty list when nothing usable came back.
    """
    if answer is None:
        return None
    body = _THINK_BLOCK.sub(" ", clean_text(answer[:MAX_ANSWER_CHARS], wrap=False))
    match = _GLOBAL_TAG.search(body)
    region = match.group(1) if match else body
    lines = [line for line in region.splitlines() if line.strip() and not line_structure(line)]
    bullets = [line[m.end():] for line, m in ((ln, _BULLET.match(ln)) for ln in lines) if m]
    if bullets:
        return [b.strip() for b in bullets]
    if match:
        return [line.strip() for line in lines]
    # No tags and no bullets: each non-empty line is an item, skipping obvious chatter lines.
    return [line.strip() for line in lines if not line.rstrip().endswith(":")]


def judge_global_items(items: Sequence[str], *, instance_terms: Iterable[str] = (),
                       tasks: Iterable[str] = ()) -> tuple[list[str], list[tuple[str, str]]]:
    """``(items kept, dropped (reason, text))``: a Global item keeps its sentences that are advice for every game:
    not the prompt's structure, not a task sentence of ``tasks`` said again, not naming one of
    ``instance_terms`` (the object ids of the games its candidates came from)."""
    terms = [re.compile(r"\b" + re.escape(t.lower()) + r"\b") for t in sorted(set(instance_terms)) if t]
    task_list = [t for t in dict.fromkeys(tasks) if t]
    kept: list[str] = []
    dropped: list[tuple[str, str]] = []
    for item in items:
        if line_structure(item):
            dropped.append((REJECT_STRUCTURE, item))
            continue
        sentences = [s for s in _SENTENCE_END.split(item.strip()) if s.strip()]
        good = []
        for s in sentences:
            if any(p.search(s.lower()) for p in terms):
                dropped.append((REJECT_INSTANCE, s))
            elif any(restates_task(s, t) for t in task_list):
                dropped.append((REJECT_TASK, s))
            else:
                good.append(s)
        if good:
            kept.append(item if len(good) == len(sentences) else " ".join(good))
    return kept, dropped


__all__ = ["COPIED_RATIO", "LINE_REASONS", "PromptView", "REJECT_CHATTER", "REJECT_COPIED", "REJECT_INSTANCE",
           "REJECT_STRUCTURE", "REJECT_TASK", "REJECT_TRUNCATED", "Verdict", "advice_lines", "copied_ratio",
           "judge_global_items", "judge_line", "judge_skill_reply", "line_structure", "parse_global_answer",
           "parse_skill_answer", "restates_task", "sentence_reason", "skill_region"]
