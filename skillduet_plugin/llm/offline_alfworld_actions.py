"""ALFWorld actions as the offline analyzer reads them: parsed into verb, object and receptacle, and phrased
with instance numbers dropped (``take knife 1 from countertop 2`` -> ``take the knife from the countertop``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from skillduet_plugin.llm.offline_common import strip_instance


@dataclass(frozen=True)
class Act:
    verb: str
    obj: str | None = None   # instance name as in the game ("knife 1")
    recep: str | None = None

    @property
    def o(self) -> str:
        return strip_instance(self.obj or "")

    @property
    def r(self) -> str:
        return strip_instance(self.recep or "")


_ACTION_PATTERNS: list[tuple[str, str]] = [
    ("go", r"go to (?P<r>.+)"), ("open", r"open (?P<r>.+)"), ("close", r"close (?P<r>.+)"),
    ("take", r"take (?P<o>.+?) from (?P<r>.+)"),
    ("move", r"(?:move|put) (?P<o>.+?) (?:to|in|on|into|onto|in/on) (?P<r>.+)"),
    ("clean", r"clean (?P<o>.+?) with (?P<r>.+)"), ("heat", r"heat (?P<o>.+?) with (?P<r>.+)"),
    ("cool", r"cool (?P<o>.+?) with (?P<r>.+)"), ("slice", r"slice (?P<o>.+?) with (?P<r>.+)"),
    ("use", r"use (?P<o>.+)"), ("examine", r"examine (?P<o>.+)"),
    ("look", r"look"), ("inventory", r"inventory"), ("help", r"help"),
]


def parse_action(action: str) -> Act:
    text = action.strip().lower()
    for verb, pattern in _ACTION_PATTERNS:
        m = re.fullmatch(pattern, text)
        if m:
            return Act(verb, m.groupdict().get("o"), m.groupdict().get("r"))
    return Act("other", text)


def phrase(act: Act) -> str:
    """The action with instance numbers dropped: ``take knife 1 from countertop 2`` -> ``take the knife from
    the countertop``."""
    if act.verb == "go":
        return f"go to the {act.r}"
    if act.verb in ("open", "close"):
        return f"{act.verb} the {act.r}"
    if act.verb == "take":
        return f"take the {act.o} from the {act.r}"
    if act.verb == "move":
        return f"move the {act.o} to the {act.r}"
    if act.verb in ("clean", "heat", "cool", "slice"):
        return f"{act.verb} the {act.o} with the {act.r}"
    if act.verb in ("use", "examine"):
        return f"{act.verb} the {act.o}"
    return act.verb if act.verb != "other" else (act.obj or "")
