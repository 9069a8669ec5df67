"""Token counting and whole-line truncation of skill text, with the policy tokenizer or a whitespace fallback.

Budgets apply to skill text only; task text and observations are never cut.
"""

from __future__ import annotations

import threading
from typing import Any, Sequence

# A fast tokenizer may raise "Already borrowed" when two threads call it at once (consolidation runs scopes on
# threads): one call at a time. Counting is CPU-bound, so the lock costs no parallelism worth having.
_TOKENIZER_LOCK = threading.RLock()


def count_tokens(text: str, tokenizer: Any = None) -> int:
    """Tokens of ``text`` under ``tokenizer`` (no special tokens added); whitespace-separated words without one."""
    if not text:
        return 0
    if tokenizer is None:
        return len(text.split())
    with _TOKENIZER_LOCK:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def count_tokens_many(texts: Sequence[str], tokenizer: Any = None) -> list[int]:
    """``[count_tokens(t, tokenizer) for t in texts]`` with one tokenizer call for all of them (a call has a
    fixed cost that dominates short texts such as the lines of a rendered trajectory)."""
    if tokenizer is None:
        return [count_tokens(t) for t in texts]
    nonempty = [t for t in texts if t]
    with _TOKENIZER_LOCK:
        ids = iter(tokenizer(nonempty, add_special_tokens=False)["input_ids"] if nonempty else [])
    return [len(next(ids)) if t else 0 for t in texts]


def truncate_lines(text: str, budget: int, tokenizer: Any = None) -> tuple[str, int]:
    """Keep the longest prefix of whole lines that fits ``budget`` tokens.

    Returns ``(text, dropped_lines)``. When even the first line does not fit, it is cut at a word boundary
    (a single overlong line must not silently erase the whole skill), and when not even its first word fits,
    that word is cut to the longest character prefix that does.
    """
    if budget <= 0:
        return "", len(text.splitlines())
    if count_tokens(text, tokenizer) <= budget:
        return text, 0
    lines = text.splitlines()
    kept: list[str] = []
    for line in lines:
        candidate = "\n".join(kept + [line])
        if count_tokens(candidate, tokenizer) > budget:
            break
        kept.append(line)
    if not kept:
        words = lines[0].split(" ") if lines else []
        lo, hi = 0, len(words)
        while lo < hi:  # longest word prefix of the first line that fits
            mid = (lo + hi + 1) // 2
            if count_tokens(" ".join(words[:mid]), tokenizer) <= budget:
                lo = mid
            else:
                hi = mid - 1
        first = " ".join(words[:lo])
        if not first and words:
            first = _char_prefix(words[0], budget, tokenizer)
        return first, len(lines) - (1 if first else 0)
    return "\n".join(kept), len(lines) - len(kept)


def _char_prefix(word: str, budget: int, tokenizer: Any = None) -> str:
    """The longest prefix of one word that fits ``budget`` tokens (a word with no spaces counts as one token
    without a tokenizer)."""
    lo, hi = 0, len(word)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_tokens(word[:mid], tokenizer) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return word[:lo]
