"""The one text-hygiene boundary: untrusted text (analyzer/synthesizer answers, user files) made safe to store
and to put in a prompt.

Analyzer and synthesizer answers are model output: they may carry lone surrogates (a JSON ``\\ud800`` escape),
NUL bytes, ANSI escape sequences, bidi overrides, chat-template control tokens, ``<think>`` blocks, role
headers, a 4,000-character "word", 100 kB of repetition, or nothing at all. :func:`clean_text` makes any text
valid UTF-8 without control or bidi characters and with every word short enough to fit a token budget;
:func:`strip_control_tokens` (which starts with it) removes chat-template tokens. Every skill text goes through
:func:`sanitize_skill` before it is stored or inserted; a rejection comes back with a machine-readable reason.
Which part of an analyzer's reply is advice at all (not an echo of its prompt) is decided in ``skills.judge``.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

# Reasons a text is rejected (machine-readable; recorded in ExtractionResult.rejected and consolidation reports).
REJECT_EMPTY = "empty"
REJECT_TOO_SHORT = "too_short"
REJECT_NO_LETTERS = "no_letters"
REJECT_REPETITIVE = "repetitive"
REJECT_BACKEND_FAILED = "backend_failed"

MIN_SKILL_CHARS = 12
#: an answer is cut to this many characters before any parsing: a skill or a Global is a few thousand
#: characters, and a server sending megabytes must cost milliseconds, not seconds
MAX_ANSWER_CHARS = 100_000
#: a longer run of non-space characters is wrapped (a space every MAX_WORD_CHARS characters): a whole-word
#: token budget can always keep a prefix of it, so a stored skill never renders as an empty section
MAX_WORD_CHARS = 48
MIN_DISTINCT_WORD_RATIO = 0.2  # below this share of distinct words (on long texts) a text is degenerate

_THINK_BLOCK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL | re.IGNORECASE)
_ROLES = r"(?:system|user|assistant|tool|human|model|developer)"
_CONTROL_PATTERNS = [
    # a turn opener with its role name, e.g. "<|im_start|>system", "<|start_header_id|>user<|end_header_id|>"
    re.compile(r"(?:<\|[^|<>\n]{0,64}\|>|<start_of_turn>)[ \t]*" + _ROLES + r"\b(?:[ \t]*<\|[^|<>\n]{0,64}\|>)?",
               re.IGNORECASE),
    re.compile(r"<\|[^|<>\n]{0,64}\|>"),                    # <|im_start|>, <|im_end|>, <|endoftext|>, <|eot_id|>
    re.compile(r"\[/?INST\]|<<\s*/?SYS\s*>>", re.IGNORECASE),  # Llama-2 chat markers
    re.compile(r"</?s>"),                                   # sentencepiece bos/eos
    re.compile(r"<(?:start|end)_of_turn>"),                 # Gemma
    re.compile(r"</?think>", re.IGNORECASE),               # stray think tags left after block removal
    re.compile(r"</?(?:skill|global)>", re.IGNORECASE),    # our own answer tags, never part of a skill
]
# A line that is only a role header, e.g. "assistant", "<|im_start|>user" after token removal, "### Assistant:".
_ROLE_HEADER = re.compile(r"^\s*(?:#+\s*)?(system|user|assistant|human|model|tool)\s*:?\s*$", re.IGNORECASE)
_WORD = re.compile(r"[A-Za-z0-9]+")
_LETTER = re.compile(r"[A-Za-z]")
# ANSI/VT escape sequences (CSI "ESC [ ... final", OSC "ESC ] ... BEL|ST", two-byte "ESC x"): removed whole,
# not just their ESC byte, so no "[31m" residue reaches a prompt.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]|\x9b[0-?]*[ -/]*[@-~]")
_LINE_BREAKS = re.compile(r"\r\n?|[\u2028\u2029\x0b\x0c\x85]")
# Removed outright: control characters but newline and tab (C0, DEL, C1), bidi embeddings/overrides/isolates
# and marks (they reorder what a reader sees), U+FFFD (what a failed decode leaves: no information for a
# model), the noncharacters U+FFFE/U+FFFF.
_DROP = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x9f\u200e\u200f\u061c\u202a-\u202e\u2066-\u2069\ufffd\ufffe\uffff]")
_LONG_WORD = re.compile(r"\S{%d,}" % (MAX_WORD_CHARS + 1))


def _wrap_long_words(text: str, width: int = MAX_WORD_CHARS) -> str:
    return _LONG_WORD.sub(lambda m: " ".join(m.group(0)[i:i + width] for i in range(0, len(m.group(0)), width)),
                          text)


def clean_text(text: Any, *, wrap: bool = True) -> str:
    """Any text (``str``, ``bytes``, None, or anything ``str()``-able) as valid, printable UTF-8.

    Invalid UTF-8 bytes and lone surrogates are dropped (a valid surrogate pair is joined); ANSI escape
    sequences, control characters other than newline and tab, bidi controls and U+FFFD are removed; other line
    breaks become ``\\n``; runs of more than :data:`MAX_WORD_CHARS` non-space characters are wrapped (unless
    ``wrap=False``: data such as observations, which must stay as the policy saw them). The result always
    encodes to UTF-8 and is idempotent under ``clean_text``.
    """
    if text is None:
        return ""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", errors="replace")
    elif not isinstance(text, str):
        text = str(text)
    if not text.isascii():
        # surrogatepass keeps a valid pair as the character it encodes; a lone half becomes U+FFFD (dropped below)
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    text = _ANSI.sub("", text)
    text = _LINE_BREAKS.sub("\n", text)
    text = _DROP.sub("", text)
    return _wrap_long_words(text) if wrap else text


def clean_strings(value: Any) -> Any:
    """``value`` with every string inside it (dicts, lists, tuples) put through ``clean_text(wrap=False)``: for
    records read from user files (trajectories) before their text reaches a prompt."""
    if isinstance(value, str):
        return clean_text(value, wrap=False)
    if isinstance(value, dict):
        return {clean_strings(k): clean_strings(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(clean_strings(v) for v in value)
    return value


def strip_control_tokens(text: str, special_tokens: Iterable[str] = ()) -> str:
    """:func:`clean_text`, then remove ``<think>`` blocks, chat-template control tokens, the tokenizer's special
    tokens and role-header lines."""
    # wrap long words only at the end: wrapping first could split a special token and let it through
    text = _THINK_BLOCK.sub(" ", clean_text(text, wrap=False))
    for token in sorted({t for t in special_tokens if t}, key=len, reverse=True):
        text = text.replace(token, " ")
    for pattern in _CONTROL_PATTERNS:
        text = pattern.sub(" ", text)
    lines = [line.rstrip() for line in text.splitlines() if not _ROLE_HEADER.match(line)]
    text = "\n".join(lines)
    text = re.sub(r"[ \t]{2,}", " ", _wrap_long_words(text))
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()


def tokenizer_special_tokens(tokenizer: Any) -> list[str]:
    """The special-token strings of a transformers tokenizer (empty when there is none)."""
    if tokenizer is None:
        return []
    tokens: list[str] = []
    for name in ("all_special_tokens", "additional_special_tokens"):
        tokens.extend(str(t) for t in (getattr(tokenizer, name, None) or []))
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    for tok in added.values():
        if getattr(tok, "special", False):
            tokens.append(str(getattr(tok, "content", tok)))
    return sorted(set(tokens))


def cap_length(text: str, max_chars: int) -> str:
    """Cut to ``max_chars`` at the last line (or word) boundary before the cap."""
    if len(text) <= max_chars:
        return text
    cut = text[:max_chars]
    for sep in ("\n", " "):
        idx = cut.rfind(sep)
        if idx >= max_chars // 2:
            return cut[:idx].rstrip()
    return cut.rstrip()


def degenerate_reason(text: str) -> str | None:
    """Why ``text`` is not a usable skill (``empty``, ``too_short``, ``no_letters``, ``repetitive``), else None."""
    if not text.strip():
        return REJECT_EMPTY
    if len(text.strip()) < MIN_SKILL_CHARS:
        return REJECT_TOO_SHORT
    if not _LETTER.search(text):
        return REJECT_NO_LETTERS
    words = [w.lower() for w in _WORD.findall(text)]
    if len(words) >= 20 and len(set(words)) / len(words) < MIN_DISTINCT_WORD_RATIO:
        return REJECT_REPETITIVE
    return None


def sanitize_skill(text: str | bytes | None, max_chars: int,
                   special_tokens: Iterable[str] = ()) -> tuple[str | None, str | None]:
    """Clean one skill text: ``(clean_text, None)`` when usable, ``(None, reason)`` otherwise."""
    if text is None:
        return None, REJECT_BACKEND_FAILED
    # Cap before the regex work too, so a 100 kB answer costs little; then cap the cleaned text exactly.
    clean = strip_control_tokens(clean_text(text[: max_chars * 4], wrap=False), special_tokens)
    clean = cap_length(clean, max_chars)
    reason = degenerate_reason(clean)
    if reason is not None:
        return None, reason
    return clean, None
