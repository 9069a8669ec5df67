"""What a shopper can read off a WebShop instruction, and the search queries built from it.

:func:`read_instruction` splits an instruction into the requested product phrase, the named options and the
price bound, from its text alone (never the hidden goal): synthetic instructions read ``Find me <attributes>
<product> with <attributes> for <attributes> with color: purple, and size: 9.5, and price lower than 70.00
dollars``; human ones (``i need a navy cotton shirt in size large, and price lower than 40.00 dollars``) keep
their option words inside the request. :func:`candidate_queries` turns that into a short, deterministic list of
queries (the request, its head phrase, its last words, each with and without the option words, a few orderings
and truncations): the search choices a tiny policy picks among in choose mode, and the searching expert's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_QUERIES = 8
_PRICE = re.compile(r"[,\s]*(?:and\s+)?price\s+lower\s+than\s+\$?\s*([0-9]+(?:\.[0-9]+)?)\s*dollars?\.?\s*$",
                    re.IGNORECASE)
# " with color: purple, and size: 9.5" at the end (option names have at most three words)
_OPTION_NAME = r"[a-z]+(?: [a-z]+){0,2}:"
_OPTIONS = re.compile(rf"\s+with\s+({_OPTION_NAME}\s*[^,]+?(?:,\s*and\s+{_OPTION_NAME}\s*[^,]+?)*)\s*$",
                      re.IGNORECASE)
_LEAD = re.compile(r"^(?:find me|i need|i want|i would like|i'd like|i am looking for|i'm looking for|"
                   r"looking for|get me|buy me|show me|search for)\s+(?:an?\s+|some\s+|the\s+)?", re.IGNORECASE)
_WORD = re.compile(r"[a-z0-9][a-z0-9'&.+-]*")


@dataclass(frozen=True)
class Request:
    """An instruction as a shopper reads it: ``request`` (product phrase and its attributes), ``head`` (the
    request before its first ``with``/``for`` clause), ``options`` (named option group -> value, in order;
    empty for human instructions) and ``budget`` (None without a price clause)."""

    instruction: str
    request: str
    head: str
    options: tuple[tuple[str, str], ...]
    budget: float | None

    @property
    def option_values(self) -> list[str]:
        return [value for _, value in self.options]


def read_instruction(instruction: str) -> Request:
    """The parts of a WebShop instruction (see the module doc); never fails, worst case the whole text."""
    text = " ".join(instruction.strip().split())
    budget = None
    m = _PRICE.search(text)
    if m:
        budget = float(m.group(1))
        text = text[:m.start()]
    options: list[tuple[str, str]] = []
    m = _OPTIONS.search(text)
    if m:
        for part in re.split(r",\s*and\s+", m.group(1)):
            name, _, value = part.partition(":")
            options.append((name.strip().lower(), value.strip().lower()))
        text = text[:m.start()]
    request = _LEAD.sub("", text.strip().rstrip(".,")).strip().lower()
    head = re.split(r"\s+(?:with|for|that|which)\s+", request, maxsplit=1)[0].strip(" ,")
    return Request(instruction=instruction, request=request, head=head or request, options=tuple(options),
                   budget=budget)


def words(text: str) -> list[str]:
    """Lowercase words of ``text`` (punctuation dropped, ``women's`` / ``3.4`` / ``slip-ons`` kept whole)."""
    return _WORD.findall(text.lower())


def _query(*parts: str) -> str:
    return " ".join(w for part in parts for w in words(part))


def candidate_queries(instruction: str, limit: int = MAX_QUERIES) -> list[str]:
    """Up to ``limit`` distinct search queries for ``instruction``, always in the same order: the whole request
    with and without the option values, its head phrase with and without them, the head's last comma-separated
    phrase (usually the product type) with and without them, the options first, and the request's first six
    words. The first one is the searching expert's query."""
    r = read_instruction(instruction)
    opts = " ".join(r.option_values)
    product = r.head.split(",")[-1]
    queries = [
        _query(r.request, opts), _query(r.request), _query(r.head, opts), _query(r.head), _query(product, opts),
        _query(product), _query(opts, product), " ".join(words(r.request)[:6]),
    ]
    unique = [q for q in dict.fromkeys(queries) if q]
    return unique[:limit] or [_query(instruction)[:100] or "product"]


__all__ = ["MAX_QUERIES", "Request", "candidate_queries", "read_instruction", "words"]
