"""Synthesizer rules of the offline backend: merge new skills into a Global, and compress a Global.

Items are compared on their content words; near-duplicates (high overlap) are merged keeping the most
specific text. Token counts are whitespace words, an approximation of the caller's tokenizer budget. A Global
holds class-level text only: a Local skill's line that holds for one game (it starts with ``GAME_LINE_PREFIX``:
where that game's objects were, with their instance numbers) never enters it.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import Iterator, Sequence

from skillduet_plugin.llm.offline_common import GAME_LINE_PREFIX

_STOPWORDS = frozenset(
    "a an the and or of to in on at for with it its is are was were be been this that then than as by from "
    "into onto your you do does did not no so if when once there here any some each every before after".split())
_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s+")
_TAGS = re.compile(r"</?(?:skill|global)>", re.IGNORECASE)

# Two items are near-duplicates at or above this overlap of content words.
DUPLICATE_OVERLAP = 0.7
# Over budget, synthesis merges items sharing a theme (at least this overlap) before dropping the newest.
THEME_OVERLAP = 0.3


def normalize(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).lower()
    return re.sub(r"\s+", " ", text).strip().rstrip(" .;:")


@lru_cache(maxsize=4096)
def content_words(text: str) -> frozenset[str]:
    return frozenset(w for w in re.findall(r"[a-z0-9$.]+", normalize(text)) if w.strip(".") not in _STOPWORDS)


def overlap(a: str, b: str) -> float:
    """Jaccard overlap of content words, raised to containment when one item is inside the other."""
    wa, wb = content_words(a), content_words(b)
    if not wa or not wb:
        return 1.0 if normalize(a) == normalize(b) else 0.0
    inter = len(wa & wb)
    jaccard = inter / len(wa | wb)
    contained = inter / min(len(wa), len(wb))
    return max(jaccard, contained if contained == 1.0 else 0.0)


def n_tokens(text: str) -> int:
    return len(text.split())


def split_items(text: str) -> list[str]:
    """Bullets or lines of a skill text; a single paragraph is split into sentences."""
    text = _TAGS.sub("", text)
    lines = [_BULLET.sub("", line).strip() for line in text.splitlines()]
    lines = [line for line in lines if line]
    if len(lines) == 1 and not _BULLET.match(text.strip()):
        sentences = re.split(r"(?<=[.!?])\s+(?=[A-Z])", lines[0])
        return [s.strip() for s in sentences if s.strip()]
    return lines


def class_level(items: Sequence[str]) -> list[str]:
    """The items that are not one game's own line (``GAME_LINE_PREFIX``): what can carry over to other games."""
    return [item for item in items if not item.startswith(GAME_LINE_PREFIX)]


def _specificity(item: str) -> tuple[int, int]:
    return len(content_words(item)), len(item)


def dedupe(items: Sequence[str], threshold: float = DUPLICATE_OVERLAP) -> list[str]:
    """Drop near-duplicates, keeping the first position and the more specific wording."""
    kept: list[str] = []
    for item in items:
        for k, existing in enumerate(kept):
            if normalize(item) == normalize(existing) or overlap(item, existing) >= threshold:
                if _specificity(item) > _specificity(existing):
                    kept[k] = item
                break
        else:
            kept.append(item)
    return kept


def _merges(items: Sequence[str]) -> Iterator[tuple[float, list[str]]]:
    """Agglomerative merging: after each merge of the two most overlapping groups (ties: earliest pair), yields
    that overlap and the representatives. A group is represented by its most specific item; groups keep
    first-seen order."""
    groups: list[list[str]] = [[item] for item in items]
    while len(groups) > 1:
        best, pair = -1.0, (0, 1)
        for i in range(len(groups)):
            for j in range(i + 1, len(groups)):
                score = max(overlap(a, b) for a in groups[i] for b in groups[j])
                if score > best:
                    best, pair = score, (i, j)
        i, j = pair
        groups[i].extend(groups.pop(j))
        yield best, [max(g, key=_specificity) for g in groups]


def cluster(items: Sequence[str], target: int) -> list[str]:
    """At most ``max(1, target)`` items, merging the most overlapping ones first."""
    current = list(items)
    if len(current) <= target:
        return current
    for _, current in _merges(items):
        if len(current) <= max(1, target):
            break
    return current


def _cost(items: Sequence[str]) -> int:
    return sum(n_tokens(i) + 1 for i in items)  # + 1: the bullet marker


def fit_budget(items: Sequence[str], budget_tokens: int) -> list[str]:
    """Keep items in order while they fit; an item that does not fit is skipped (a later, shorter one may)."""
    kept, used = [], 0
    for item in items:
        cost = n_tokens(item) + 1  # the bullet marker
        if used + cost <= budget_tokens:
            kept.append(item)
            used += cost
    return kept


def synthesize(current: Sequence[str], new: Sequence[str], budget_tokens: int) -> list[str]:
    """Current items first, then new items in the order given, near-duplicates merged; when over budget,
    items sharing a theme are merged (the most specific wording kept) before the last ones are dropped."""
    items = dedupe(class_level([c for text in current for c in split_items(text)]
                               + [n for text in new for n in split_items(text)]))
    if _cost(items) > budget_tokens:
        for score, merged in _merges(items):
            if score < THEME_OVERLAP:
                break  # what is left is unrelated: merging would just drop items by length, not by order
            items = merged
            if _cost(items) <= budget_tokens:
                return items
    return fit_budget(items, budget_tokens)


def compress(items: Sequence[str], target_items: int) -> list[str]:
    """At most ``target_items`` items: duplicates removed, then overlapping items merged by theme."""
    flat = dedupe(class_level([i for text in items for i in split_items(text)]))
    return cluster(flat, target_items) if len(flat) > target_items else flat


def as_global(items: Sequence[str]) -> str:
    body = "\n".join(f"- {item}" for item in items)
    return f"<global>\n{body}\n</global>" if body else "<global>\n</global>"
