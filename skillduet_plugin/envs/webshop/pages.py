"""WebShop's pages as ordered visible elements, rendered as the ``text`` and ``text_rich`` observations.

Each page lists its visible texts in document order, as the benchmark's HTML templates show them; ``text`` joins
them with `` [SEP] ``, ``text_rich`` marks buttons ``[button] X [button_]``, selected options
``[clicked button] X [clicked button_]`` (prefixing ``You have clicked X.`` lines) and visited products.
Clickables are the lowercased button and product-link texts, then the option values, in page order.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

BACK_TO_SEARCH = "Back to Search"
NEXT_PAGE = "Next >"
PREV_PAGE = "< Prev"
BUY_NOW = "Buy Now"
SUB_PAGES = ("Description", "Features", "Reviews", "Attributes")
SEP = " [SEP] "


@dataclass(frozen=True)
class Element:
    """One visible text: ``kind`` is ``text``, ``button``, ``link`` (a product asin) or ``option`` (group ``name``)."""

    text: str
    kind: str = "text"
    name: str | None = None


def _header(instruction: str) -> list[Element]:
    return [Element("Instruction:"), Element(instruction)]


def index_page(instruction: str) -> list[Element]:
    """The start page: logo, instruction, search box."""
    return [Element("WebShop"), *_header(instruction), Element("Search", "button")]


def results_page(instruction: str, products: list[dict[str, Any]], page: int, total: int) -> list[Element]:
    """One page of search results (the benchmark always shows ``Next >``; ``< Prev`` after page 1)."""
    elements = [*_header(instruction), Element(BACK_TO_SEARCH, "button"),
                Element(f"Page {page} (Total results: {total})")]
    if page > 1:
        elements.append(Element(PREV_PAGE, "button"))
    elements.append(Element(NEXT_PAGE, "button"))
    for product in products:
        elements += [Element(product["asin"], "link"), Element(product["Title"]), Element(product["Price"])]
    return elements


def item_page(instruction: str, product: dict[str, Any], show_attrs: bool = False) -> list[Element]:
    """A product: option groups, title, price, rating, sub-page buttons, ``Buy Now``."""
    elements = [*_header(instruction), Element(BACK_TO_SEARCH, "button"), Element(PREV_PAGE, "button")]
    for name, values in product["options"].items():
        elements.append(Element(name))
        elements += [Element(value, "option", name) for value in values]
    elements += [Element(product["Title"]), Element(f"Price: {product['Price']}"),
                 Element(f"Rating: {product['Rating']}")]
    elements += [Element(name, "button") for name in SUB_PAGES[:3]]
    if show_attrs:
        elements.append(Element("Attributes", "button"))
    elements.append(Element(BUY_NOW, "button"))
    return elements


def sub_page(instruction: str, product: dict[str, Any], which: str) -> list[Element]:
    """``Description`` / ``Features`` / ``Reviews`` / ``Attributes`` of a product, with ``< Prev`` back."""
    elements = [*_header(instruction), Element(BACK_TO_SEARCH, "button"), Element(PREV_PAGE, "button")]
    if which == "Description":
        texts = [product["Description"]]
    elif which == "Features":
        texts = list(product["BulletPoints"])
    elif which == "Reviews":
        texts = []
        for review in product["Reviews"]:
            texts += [f"\"{review.get('title', '')}\"", str(review.get("score", "")), review.get("body", "")]
    else:
        texts = list(product["Attributes"])
    return elements + [Element(t.strip()) for t in texts if t and t.strip()]


def done_page(asin: str, options: dict[str, str], reward: float) -> list[Element]:
    """The confirmation page with the score (the benchmark's hidden purchase/target fields stay empty)."""
    texts = ["Thank you for shopping with us!", "Your code:", "None", "(Paste it in your MTurk interface.)",
             "Purchased", "asin", asin, "options", json.dumps(options, sort_keys=True),
             "attrs", "None", "category", "None", "query", "None", "product category", "None",
             "Target", "asin", "options", "attrs", "price upper", "instuction text", "category",
             "product category", "query", "Goal", "None", "Reward",
             "Your score (min 0.0, max 1.0)", str(reward), "Reward Details", "None"]
    return [Element(t) for t in texts]


def render_text(elements: list[Element]) -> str:
    """The ``text`` observation."""
    return SEP.join(e.text for e in elements)


def render_text_rich(elements: list[Element], selected_options: dict[str, str], visited_asins: set[str]) -> str:
    """The ``text_rich`` observation (one element per line)."""
    selected = set(selected_options.values())
    clicked_lines, body = [], []
    for e in elements:
        if e.kind == "button":
            body.append(f"[button] {e.text} [button_]")
        elif e.kind == "option":
            if e.text in selected:
                body.append(f"  [clicked button] {e.text} [clicked button_]")
                clicked_lines.insert(0, f"You have clicked {e.text}.")
            else:
                body.append(f"  [button] {e.text} [button_]")
        elif e.kind == "link":
            mark = "clicked button" if e.text in visited_asins else "button"
            body.append(f"\n[{mark}] {e.text} [{mark}_]")
        else:
            body.append(e.text)
    return "".join(f"{line}\n" for line in clicked_lines + body)


def clickables(elements: list[Element]) -> dict[str, Element]:
    """Clickable name -> element: buttons and product links (lowercased), then option values (last group wins)."""
    table = {e.text.lower(): e for e in elements if e.kind in ("button", "link")}
    for e in elements:
        if e.kind == "option":
            table[e.text] = e
    return table
