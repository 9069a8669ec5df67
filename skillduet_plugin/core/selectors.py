"""The selector registry: which score ranks Local candidates at consolidation (``SkillDuetConfig.selector``).

A selector is a name, the score it ranks by, and (when it brings a new score) the function that computes that
score from a candidate's held-out rows: ``fn(shifts, advantages, successes) -> float | None`` (None: undefined,
the candidate ranks below every scored one). Everything else derives from this registry: the valid ``selector``
names of the config, the scores computed for every candidate (``score_names()``), the scores the skill bank
stores, and the ranking at consolidation. The built-ins are the paper's: ``strength`` (default), ``utility``,
``contrast`` and ``random`` (a seeded shuffle; it computes no score of its own and orders near-duplicates by
Strength).

Adding one (in a module an installed package names in the ``skillduet.selectors`` entry-point group, loaded on
the first lookup in every process, or in any module imported before the config is built)::

    @register_selector("mine")
    def mine(shifts, advantages, successes):
        return max(shifts, default=None)

This module stays importable without torch (config validation reads the names only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from skillduet_plugin.core.registry import Registry
from skillduet_plugin.core.settings import ConfigError

#: ``fn(shifts, advantages, successes) -> the candidate's score`` (None: undefined, ranks last)
ScoreFn = Callable[[Sequence[float], Sequence[float], Sequence[bool]], "float | None"]


@dataclass(frozen=True)
class Selector:
    """A ranking of candidates: by the score ``score`` (computed by ``compute`` when this selector brings it),
    or, with ``shuffle``, by a seeded shuffle (``score`` then only orders near-duplicates)."""

    name: str
    score: str
    compute: ScoreFn | None = None
    shuffle: bool = False


#: The entry-point group through which an installed package adds selectors.
ENTRY_POINT_GROUP = "skillduet.selectors"
SELECTORS: Registry[Selector] = Registry("selector", "selectors", group=ENTRY_POINT_GROUP)

#: Names a score cannot take: a scored candidate's own fields and methods (``skills.scoring.SkillScore``, whose
#: scores are also read as attributes) and the other keys of its bank record; a score under one of them would be
#: shadowed by it. Dunder names are refused too.
RESERVED_SCORE_NAMES = frozenset({"skill_id", "values", "n_heldout", "shifts", "note", "as_record", "scored_step"})


def register_selector(name: str, *, replace: bool = False) -> Callable[[ScoreFn], ScoreFn]:
    """``@register_selector(name)`` on ``fn(shifts, advantages, successes) -> float | None``: a selector ranking by
    its own score ``name``, computed for every candidate and stored in the bank under that name."""
    if name in RESERVED_SCORE_NAMES or (isinstance(name, str) and name.startswith("__")):
        raise ConfigError(f"selector={name!r} is invalid: a scored candidate's own field or record key has that "
                          f"name ({', '.join(sorted(RESERVED_SCORE_NAMES))} and dunder names are taken); pick another")

    def add(fn: ScoreFn) -> ScoreFn:
        known = SELECTORS.peek(name)  # no lookup: registering never loads the installed packages
        if known is not None and known.compute is fn:
            return fn  # the same function again (its module imported twice)
        SELECTORS.register(name, Selector(name, score=name, compute=fn), replace=replace)
        return fn

    return add


def get_selector(name: str) -> Selector:
    """The selector registered as ``name``; the error names the registered ones (a one-line ``ConfigError``)."""
    return SELECTORS.get(name)


def score_names() -> list[str]:
    """The scores computed for every candidate: one per selector that computes its own, in name order."""
    return [name for name in SELECTORS.names() if SELECTORS.get(name).compute is not None]


def compute_scores(shifts: Sequence[float], advantages: Sequence[float],
                   successes: Sequence[bool]) -> dict[str, float | None]:
    """Every registered score of one candidate from its held-out rows."""
    return {name: SELECTORS.get(name).compute(shifts, advantages, successes)  # type: ignore[misc]
            for name in score_names()}


def _math():
    # core.scores needs torch; keeping it out of this module's imports keeps config validation torch-free
    from skillduet_plugin.core import scores  # lazy: torch

    return scores


@register_selector("strength")
def _strength(shifts: Sequence[float], advantages: Sequence[float], successes: Sequence[bool]) -> float | None:
    return _math().strength(shifts)


@register_selector("utility")
def _utility(shifts: Sequence[float], advantages: Sequence[float], successes: Sequence[bool]) -> float | None:
    return _math().utility(shifts, advantages) if len(shifts) else None


@register_selector("contrast")
def _contrast(shifts: Sequence[float], advantages: Sequence[float], successes: Sequence[bool]) -> float | None:
    return _math().contrast(shifts, successes) if len(shifts) else None


# Random ranking draws its order at consolidation (core.scores.select_top with the seeded rng): no score.
SELECTORS.register("random", Selector("random", score="strength", shuffle=True))


__all__ = ["ENTRY_POINT_GROUP", "SELECTORS", "ScoreFn", "Selector", "compute_scores", "get_selector",
           "register_selector", "score_names"]
