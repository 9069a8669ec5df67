"""WebShop's action text: ``search[query]`` / ``click[x]`` parsed, and the labelled ``click[item k]`` links of a
results page, shared by the environment and its experts (which must write what the environment reads).
"""

from __future__ import annotations

import re

_ACTION = re.compile(r"(.+)\[(.+)\]")
_ROW = re.compile(r"item (\d+)")


def row_action(row: int) -> str:
    """The labelled link to a results page's ``row`` (1-based): ``click[item <row>]`` (``result_labels``)."""
    return f"click[item {row}]"


def labelled_row(arg: str | None) -> int | None:
    """The row a labelled link's argument names (``"item 3"`` -> 3); None for anything else."""
    match = _ROW.fullmatch(arg or "")
    return int(match.group(1)) if match else None


def parse_action(action: str) -> tuple[str, str | None]:
    """``"click[Buy Now]"`` -> ``("click", "buy now")``; text without brackets -> ``(text, None)``."""
    match = _ACTION.match(action)
    if match is None:
        return action, None
    name, arg = match.groups()
    return name, arg.lower()


__all__ = ["labelled_row", "parse_action", "row_action"]
