"""WebShop rules of the offline analyzer: search, item choice, options, price check and purchase.

Works on the text-mode pages (``[SEP]``-joined) and the ``search[...]`` / ``click[...]`` actions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from skillduet_plugin.envs.webshop.env import labelled_row
from skillduet_plugin.envs.webshop.expert import item_price, item_title
from skillduet_plugin.llm.offline_common import (OfflineRules, Traj, find_loop, first_divergence, join_list,
                                                 register_offline_rules)

_NAV = {"back to search", "next >", "< prev", "search"}
_INFO = {"description", "features", "reviews", "attributes"}
_ASIN = re.compile(r"b0[0-9a-z]{8}")
_PRICE = re.compile(r"\$\s*([0-9]+(?:\.[0-9]+)?)")
_BUDGET = re.compile(r"price lower than\s*\$?\s*([0-9]+(?:\.[0-9]+)?)\s*dollars", re.IGNORECASE)
# option group headers on an item page (WebShop's customization_options keys)
_OPTION_GROUPS = ("color", "size", "style", "pattern", "flavor name", "flavor", "scent", "material",
                  "item package quantity", "package quantity", "count", "capacity", "configuration", "design",
                  "length", "width", "fit type", "special size")


@dataclass(frozen=True)
class WebTask:
    instruction: str
    wants: str            # the instruction without its price clause
    budget: float | None


def parse_task(task: str) -> WebTask:
    text = task.strip()
    for marker in ("Instruction: [SEP]", "Instruction:"):
        if marker in text:
            text = text.split(marker, 1)[1]
            break
    text = text.split("[SEP]")[0].strip()
    m = _BUDGET.search(text)
    budget = float(m.group(1)) if m else None
    wants = _BUDGET.sub("", text)
    wants = re.sub(r"^(?:i need|i want|i am looking for|i'm looking for|find me|look for)\s+", "",
                   wants.strip(), flags=re.IGNORECASE)
    wants = re.sub(r"[,\s]*(?:and)?\s*$", "", wants).strip()
    return WebTask(text, wants, budget)


@dataclass
class Session:
    """What the shopper did: searches, items opened (with page price and option groups), options, purchase."""

    searches: list[str] = field(default_factory=list)
    items: list[tuple[str, float | None, list[str], int | None]] = field(default_factory=list)
    options: list[str] = field(default_factory=list)
    info_clicks: int = 0
    pages: int = 0
    noops: int = 0
    bought: bool = False
    bought_price: float | None = None
    bought_groups: list[str] = field(default_factory=list)
    options_at_buy: list[str] = field(default_factory=list)
    useful: list[str] = field(default_factory=list)
    # asin -> what the shopper read about it: the item page's title, plus any description/features page opened
    read: dict[str, str] = field(default_factory=dict)
    checked: list[str] = field(default_factory=list)  # sub-pages opened on the last item opened


def _parse(action: str) -> tuple[str, str]:
    m = re.fullmatch(r"\s*(search|click)\s*\[(.*)\]\s*", action, re.IGNORECASE)
    if not m:
        return "other", action.strip()
    return m.group(1).lower(), m.group(2).strip().lower()


def replay(traj: Traj) -> Session:
    out = Session()
    previous_obs = traj.initial_observation
    last_results = traj.initial_observation
    for step in traj.steps:
        verb, arg = _parse(step.action)
        row = labelled_row(arg) if verb == "click" else None
        if row is not None:  # a labelled product link (the env's result_labels): the asin in that row
            shown = _ASIN.findall(previous_obs.lower()) if previous_obs else []
            arg = shown[row - 1] if 1 <= row <= len(shown) else arg
        same_page = bool(previous_obs) and step.observation == previous_obs
        if verb == "search":
            out.searches.append(arg)
            out.options = []
            last_results = step.observation
            out.useful.append(f"search[{arg}]")
        elif verb == "click" and arg == "buy now":
            out.bought = True
            if out.items:
                out.bought_price, out.bought_groups = out.items[-1][1], out.items[-1][2]
            out.options_at_buy = list(out.options)
            out.useful.append("click[buy now]")
        elif verb == "click" and _ASIN.fullmatch(arg):
            if same_page:
                out.noops += 1
            else:
                out.items.append((arg, item_price(step.observation), _option_groups(step.observation),
                                  _rank(last_results, arg)))
                out.read[arg] = f"{out.read.get(arg, '')} {item_title(step.observation)}"
                out.checked = []
                out.options = []
                out.useful.append(f"click[{arg}]")
        elif verb == "click" and arg in _INFO:
            out.info_clicks += 1
            if out.items:
                asin = out.items[-1][0]
                out.read[asin] = f"{out.read.get(asin, '')} {_page_text(step.observation)}"
                out.checked.append(arg)
        elif verb == "click" and arg in ("next >", "< prev"):
            out.pages += 1
            last_results = step.observation
        elif verb == "click" and arg in _NAV:
            pass
        elif verb == "click":
            # Text-mode item pages may look the same after an option click, so only "no item open" is a no-op.
            if not out.items:
                out.noops += 1
            elif arg not in out.options:
                out.options.append(arg)
                out.useful.append(f"click[{arg}]")
        else:
            out.noops += 1
        previous_obs = step.observation
    return out


def _page_text(page: str) -> str:
    """A sub-page's own text: what follows its ``< Prev`` button (the instruction header is dropped)."""
    return page.split("< Prev", 1)[1] if "< Prev" in page else ""


def _option_groups(page: str) -> list[str]:
    segments = [s.strip().lower() for s in page.split("[SEP]")]
    return [g for g in _OPTION_GROUPS if g in segments]


def _rank(results: str, asin: str) -> int | None:
    found = [a.lower() for a in _ASIN.findall(results.lower())]
    return found.index(asin) + 1 if asin in found else None


_FILLER = frozenset("a an the and or of for in on with to i need want looking size color pack count that is are "
                    "my me it".split())


def _missing_words(task: WebTask, query: str) -> list[str]:
    """Content words of the request missing from the query, when the query covers under half of them."""
    wants = [w for w in re.findall(r"[a-z0-9]+", task.wants.lower()) if w not in _FILLER]
    have = set(re.findall(r"[a-z0-9]+", query.lower()))
    missing = [w for w in dict.fromkeys(wants) if w not in have]
    return missing if wants and len(missing) * 2 > len(set(wants)) else []


def _price_note(task: WebTask, price: float | None) -> str:
    if price is None or task.budget is None:
        return ""
    relation = "under" if price <= task.budget else "OVER"
    return f" (${price:.2f}, {relation} the ${task.budget:.2f} budget)"


def procedure(task: WebTask, traj: Traj) -> str:
    s = replay(traj)
    parts: list[str] = []
    if s.searches:
        parts.append(f"search with the product type and key attributes, e.g. search[{s.searches[-1]}]")
    if s.items:
        _, price, groups, rank = s.items[-1]
        place = f"result #{rank}" if rank else "the result"
        parts.append(f"open the {place} whose title matches the request{_price_note(task, price)}")
        if s.options_at_buy or groups:
            chosen = join_list(s.options_at_buy, limit=5) or "none"
            which = f" ({join_list(groups)})" if groups else ""
            parts.append(f"select every option the instruction names{which}: here {chosen}")
    parts.append("check the price against the budget, then click[buy now]")
    steps = "; ".join(f"{i + 1}) {p}" for i, p in enumerate(parts))
    return f"Procedure for WebShop purchases (e.g. '{task.wants}'): {steps}."


def correction(task: WebTask, traj: Traj) -> list[str]:
    s = replay(traj)
    lines: list[str] = []
    if not s.searches:
        lines.append(f"Never searched: start with search[...] using the product type and its key attributes "
                     f"(e.g. search[{task.wants}]).")
    elif not s.items:
        lines.append("Searched but never opened an item: click the result whose title best matches the request "
                     "instead of searching or paging again.")
    if s.searches and s.bought and traj.reward < 1.0:
        missing = _missing_words(task, s.searches[-1])
        if missing:
            lines.append(f"The query [{s.searches[-1]}] left out requested attributes ({join_list(missing, limit=5)}): "
                         "search with the product type plus its key attributes.")
    if s.bought:
        if s.bought_groups and not s.options_at_buy:
            lines.append(f"Bought without selecting any option although the item offers "
                         f"{join_list(s.bought_groups)}: click the option values the instruction asks for "
                         "before buy now.")
        if s.bought_price is not None and task.budget is not None and s.bought_price > task.budget:
            lines.append(f"Bought an item at ${s.bought_price:.2f}, over the ${task.budget:.2f} budget: check "
                         "Price on the item page and pick a cheaper match.")
        if traj.reward < 1.0:
            lines.append(f"The purchase scored {traj.reward:.2f} of 1.0: the item or its options matched the "
                         f"instruction only partly; compare title, attributes and options with '{task.wants}' "
                         "before buying.")
    elif traj.steps:
        lines.append(f"Never bought anything in {len(traj.steps)} actions: once a matching item is open, select "
                     "its options and click[buy now] instead of browsing further.")
    if len(s.searches) >= 3:
        lines.append(f"Searched {len(s.searches)} times: keep the query short (product type + 2-3 attributes) "
                     "and open a promising result instead of re-searching.")
    if s.pages >= 2:
        lines.append(f"Paged through results {s.pages} times: refine the search query instead of paging.")
    if s.noops:
        lines.append(f"{s.noops} action(s) changed nothing: click only buttons present on the current page, "
                     "exactly as written.")
    loop = find_loop(traj.steps)
    if loop:
        lines.append(f"Stuck in a loop repeating {' -> '.join(loop.cycle)} {loop.repeats} times.")
    if not lines:
        lines.append(f"The attempt did not succeed: match every attribute of '{task.wants}', select the options, "
                     "check the price, then buy.")
    return lines


def local_procedure(task: WebTask, traj: Traj) -> list[str]:
    s = replay(traj)
    lines = [procedure(task, traj)]
    if s.info_clicks or s.pages or len(s.searches) > 1:
        lines.append("Detours (description/features/reviews pages, paging, re-searching) were not needed: go "
                     "from a focused search straight to the matching item.")
    return lines


def requested_attributes(task: WebTask) -> list[str]:
    """The attribute phrases of the request (``noise cancelling``, ``stereo sound headphones``), without the
    named options (``color: purple``) and the price clause."""
    phrases = re.split(r",\s*(?:and\s+)?|\s+(?:with|for|and|in|that is|that are)\s+", task.wants.lower())
    phrases = [re.sub(r"^(?:a|an|the|some)\s+", "", p.strip()) for p in phrases]
    return [p for p in dict.fromkeys(phrases) if p and ":" not in p and not p.startswith("size ")]


def _names(phrase: str, text: str) -> bool:
    """Every content word of ``phrase`` appears in ``text`` (plural ``s`` ignored)."""
    have = {w.rstrip("s") for w in re.findall(r"[a-z0-9]+", text.lower())}
    want = [w.rstrip("s") for w in re.findall(r"[a-z0-9]+", phrase.lower()) if w not in _FILLER]
    return bool(want) and all(w in have for w in want)


def _attribute_lines(task: WebTask, ss: Session, fs: Session) -> list[str]:
    """Requested attributes the success's item showed (title, or a sub-page it read) that the failure's did not."""
    s_item = ss.items[-1][0] if ss.items else None
    f_item = fs.items[-1][0] if fs.items else None
    if s_item is None or f_item is None or s_item == f_item:
        return []
    s_text, f_text = ss.read.get(s_item, ""), fs.read.get(f_item, "")
    found = [a for a in requested_attributes(task) if _names(a, s_text) and not _names(a, f_text)]
    if not found:
        return []
    where = f"title and {join_list(ss.checked)}" if ss.checked else "title"
    line = (f"Attributes: the successful attempt's item ({s_item}) names {join_list(found, limit=4)} in its "
            f"{where}; the failed attempt's item ({f_item}) does not: open items whose title or features "
            "show every requested attribute.")
    return [line]


def pair(task: WebTask, success: Traj, failure: Traj) -> list[str]:
    ss, fs = replay(success), replay(failure)
    lines: list[str] = []
    missing = [o for o in ss.options_at_buy if o not in fs.options_at_buy]
    if missing and fs.bought:
        other = [o for o in fs.options_at_buy if o not in ss.options_at_buy]
        instead = f"selected {join_list(other, limit=5)} instead" if other else "bought without them"
        lines.append(f"Key decision: select the options the instruction names ({join_list(missing, limit=5)}) "
                     f"before clicking buy now; the failed attempt {instead}.")
    lines += _attribute_lines(task, ss, fs)
    if ss.searches and fs.searches and ss.searches[0] != fs.searches[0]:
        lines.append(f"Search query: the successful attempt searched [{ss.searches[0]}], the failed one "
                     f"[{fs.searches[0]}]; include the product type and the distinguishing attributes.")
    if ss.items and fs.items and ss.items[-1][0] != fs.items[-1][0] and not any(
            line.startswith("Attributes:") for line in lines):
        lines.append("Item choice: the failed attempt opened a different item; pick the result whose title "
                     "matches the requested product type and attributes" + _price_note(task, ss.items[-1][1]) + ".")
    if not fs.bought and ss.bought:
        lines.append("The failed attempt never clicked buy now: once the item and options match, buy instead of "
                     "browsing.")
    d = first_divergence(ss.useful, fs.useful)
    if d is not None and d < len(ss.useful) and d < len(fs.useful) and not lines:
        lines.append(f"First divergence: success did {ss.useful[d]}, failure did {fs.useful[d]}.")
    lines.append(procedure(task, success))
    # One extra correction at most, not one the key decision already states (Local skills are budgeted).
    said_query = any(line.startswith("Search query:") for line in lines)
    extra = [c for c in correction(task, failure)
             if not (missing and c.startswith("Bought without selecting"))
             and not (said_query and c.startswith("The query ["))]
    lines.extend(extra[:1])
    return lines


RULES = OfflineRules(parse_task=lambda task, scope: parse_task(task), pair=pair, local_procedure=local_procedure,
                     correction=correction)
register_offline_rules("webshop", RULES)
