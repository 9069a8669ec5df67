"""``quietest``: a selector (found through the ``skillduet.selectors`` entry point)."""

from __future__ import annotations

from typing import Sequence

from skillduet_plugin.core.selectors import register_selector


@register_selector("quietest")
def quietest(shifts: Sequence[float], advantages: Sequence[float], successes: Sequence[bool]) -> float | None:
    """The candidate that moves the policy least ranks first (the opposite of Strength)."""
    return -sum(abs(v) for v in shifts) / len(shifts) if shifts else None
