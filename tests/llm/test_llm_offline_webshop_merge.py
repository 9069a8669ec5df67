"""The offline analyzer on WebShop sessions, and the offline synthesizer (merge, budget, compress)."""

from __future__ import annotations

from llm_trajectories import WEB_ITEM, WEB_RESULTS, WEB_START, WEB_TASK, traj, web_failure, web_success

from skillduet_plugin.llm.offline import respond
from skillduet_plugin.llm.offline_merge import split_items


def _web(kind: str, **fields) -> list[str]:
    out = respond({"kind": kind, "env": "webshop", "task": WEB_TASK, "scope": "webshop", **fields})
    assert out.startswith("<skill>\n") and out.endswith("\n</skill>")
    return [line[2:] for line in out.splitlines() if line.startswith("- ")]


def test_webshop_pair_names_the_missing_options_and_the_query():
    lines = _web("local_pair", success=web_success(), failure=web_failure())
    assert lines[0] == ("Key decision: select the options the instruction names (navy and large) before clicking "
                        "buy now; the failed attempt bought without them.")
    assert lines[1].startswith("Search query: the successful attempt searched [long sleeve cotton shirt navy], "
                               "the failed one [shirt]")


def test_webshop_procedure_search_open_options_price_buy():
    (line,) = _web("local_procedure", trajectory=web_success())
    assert line == (
        "Procedure for WebShop purchases (e.g. 'a long sleeve cotton shirt in navy, size large'): 1) search with "
        "the product type and key attributes, e.g. search[long sleeve cotton shirt navy]; 2) open the result #1 "
        "whose title matches the request ($24.99, under the $40.00 budget); 3) select every option the "
        "instruction names (color and size): here navy and large; 4) check the price against the budget, then "
        "click[buy now].")


def test_webshop_corrections():
    lines = _web("local_correction", trajectory=web_failure())
    assert lines[0].startswith("The query [shirt] left out requested attributes (long, sleeve, cotton, navy and "
                               "large)")
    assert lines[1].startswith("Bought without selecting any option although the item offers color and size")
    assert lines[2].startswith("The purchase scored 0.50 of 1.0")

    expensive_item = WEB_ITEM.replace("Price: $24.99", "Price: $52.00")
    over = traj("o", WEB_TASK, [("search[long sleeve cotton shirt navy large]", WEB_RESULTS),
                                ("click[b09qqp3356]", expensive_item), ("click[navy]", expensive_item),
                                ("click[large]", expensive_item), ("click[buy now]", "Thank you for shopping")],
                False, 0.8, initial=WEB_START)
    assert any(line.startswith("Bought an item at $52.00, over the $40.00 budget")
               for line in _web("local_correction", trajectory=over))

    browsing = traj("b", WEB_TASK, [("search[shirt]", WEB_RESULTS), ("click[next >]", WEB_RESULTS),
                                    ("click[next >]", WEB_RESULTS), ("click[b09qqp3356]", WEB_ITEM),
                                    ("click[reviews]", WEB_ITEM)], False, 0.0, initial=WEB_START)
    lines = _web("local_correction", trajectory=browsing)
    assert lines[0].startswith("Never bought anything in 5 actions")
    assert lines[1] == "Paged through results 2 times: refine the search query instead of paging."

    idle = traj("i", WEB_TASK, [("click[b09qqp3356]", WEB_START)], False, 0.0, initial=WEB_START)
    lines = _web("local_correction", trajectory=idle)
    assert lines[0] == ("Never searched: start with search[...] using the product type and its key attributes "
                        "(e.g. search[a long sleeve cotton shirt in navy, size large]).")
    assert "1 action(s) changed nothing" in lines[-1]


def _global(out: str) -> list[str]:
    assert out.startswith("<global>\n") and out.endswith("</global>")
    return [line[2:] for line in out.splitlines() if line.startswith("- ")]


def test_split_items_bullets_lines_and_sentences():
    assert split_items("<skill>\n- Clean it first.\n* Then move it.\n2) Buy.\n</skill>") == [
        "Clean it first.", "Then move it.", "Buy."]
    assert split_items("Clean the knife first. Then move it to the drawer.") == [
        "Clean the knife first.", "Then move it to the drawer."]


def test_synthesize_dedupes_against_current_and_keeps_order():
    current = ["Clean the object with the sinkbasin before moving it to the target.",
               "Open closed receptacles before taking from them."]
    new = ["<skill>\n- clean the object with the sinkbasin before moving it to the target\n"
           "- Check the countertops first when looking for kitchen tools.\n</skill>",
           "- Open closed receptacles before taking from them!\n- Never repeat an action that says Nothing happens."]
    items = _global(respond({"kind": "synthesize", "scope": "clean", "current": current, "new": new,
                             "budget_tokens": 200}))
    assert items == [current[0], current[1], "Check the countertops first when looking for kitchen tools.",
                     "Never repeat an action that says Nothing happens."]


def test_synthesize_respects_the_budget():
    current = ["Take the knife from the countertop and clean it with the sinkbasin."]
    new = ["- Heat the egg with the microwave before moving it to the countertop.",
           "- Heat the potato with the microwave before moving it to the countertop.",
           "- Use the desklamp while holding the alarmclock."]
    payload = {"kind": "synthesize", "scope": "s", "current": current, "new": new}
    items = _global(respond({**payload, "budget_tokens": 1000}))
    assert items == [current[0]] + [n[2:] for n in new]
    # 13 + 13 + 13 + 8 words with markers = 47 > 40: the two heat items (one theme) merge, keeping the more
    # specific (longer) wording, before anything is dropped
    assert _global(respond({**payload, "budget_tokens": 40})) == [current[0], new[1][2:], new[2][2:]]
    # 34 > 25 and nothing else shares a theme: the newest items that do not fit are dropped, current first
    assert _global(respond({**payload, "budget_tokens": 25})) == [current[0], new[2][2:]]
    # an item longer than the whole budget is skipped, a later one that fits is kept
    assert _global(respond({**payload, "budget_tokens": 12})) == [new[2][2:]]


def test_compress_merges_overlapping_items_keeping_the_most_specific():
    items = ["Clean the knife before moving it.",
             "Open the drawer before moving the knife into it.",
             "Clean the knife with the sinkbasin before moving it to the drawer.",
             "Open closed drawers before moving objects into them.",
             "Search countertops first for kitchen tools."]
    out = _global(respond({"kind": "compress", "scope": "s", "items": items, "target_items": 3}))
    assert len(out) == 3
    assert "Clean the knife with the sinkbasin before moving it to the drawer." in out
    assert "Clean the knife before moving it." not in out
    assert out[-1] == "Search countertops first for kitchen tools."
    # already small enough: unchanged
    assert _global(respond({"kind": "compress", "scope": "s", "items": items[:2], "target_items": 3})) == items[:2]


def test_generic_environment_fallback():
    t = traj("g", "reach the exit", [("north", "You go north."), ("jump", "Nothing happens."),
                                     ("east", "You reach the exit.")], True)
    f = traj("h", "reach the exit", [("south", "You go south."), ("south", "Nothing happens.")], False)
    out = respond({"kind": "local_pair", "env": "maze", "task": "reach the exit", "scope": "maze",
                   "success": t, "failure": f})
    assert "Key decision at the start: do 'north' (success), not 'south' (failure)." in out
    assert "1) north; 2) east" in out
