"""Replay the 9 recorded human WebShop sessions: the same page sequence, keywords, result pages, products,
option selections and purchases, on stand-in catalogues holding the recorded products."""

from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("thefuzz")

from skillduet_plugin.envs.webshop import make_webshop, write_catalogue  # noqa: E402

ASIN = re.compile(r"\[SEP\] (B[0-9A-Z]{9}) \[SEP\]")


def _sessions(shared_data):
    paths = sorted((shared_data / "webshop" / "human_trajs").glob("*.jsonl"))
    assert len(paths) == 9
    for path in paths:
        yield path.name, [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _keywords(content):
    kw = content["keywords"]
    return json.loads(kw.replace("'", '"')) if isinstance(kw, str) else kw


def _catalogue(rows):
    """Every recorded result list, in recorded order, as products whose searchable text is the query itself;
    all products carry the recorded option values, so equal documents keep catalogue (= recorded) order."""
    options: dict[str, list[str]] = {}
    for row in rows:
        for key, value in (row.get("content") or {}).get("options", {}).items():
            options.setdefault(key, []).append(value) if value not in options.get(key, []) else None
    price = {r["content"]["asin"]: r["content"]["price"] for r in rows if r["page"] == "done"}
    results = sorted((r for r in rows if r["page"] == "search_results"), key=lambda r: r["content"]["page"])
    products, seen = [], set()
    for row in results:
        for asin in row["content"]["search_result_asins"]:
            if asin not in seen:
                seen.add(asin)
                products.append({
                    "asin": asin, "name": " ".join(row["content"]["keywords"]), "full_description": "",
                    "small_description": [], "images": [""], "pricing": f"${price.get(asin, 10.0)}",
                    "product_category": "A › B", "category": "x", "query": "q",
                    "customization_options": {k: [{"value": v} for v in vs] for k, vs in options.items()}})
    attributes = {products[0]["asin"]: {"attributes": ["x"], "instruction": "Find me q", "instruction_attributes":
                                        ["x"]}}
    return products, attributes


def _action(prev, row, state):
    """The action a shopper took to get from page ``prev`` to ``row`` (from the recorded URLs and contents)."""
    page, content = row["page"], row.get("content") or {}
    if page == "index":
        return "reload" if prev["page"] == "index" else "click[back to search]"
    if page == "search_results":
        if prev["page"] == "item_page":
            return "click[< prev]"
        if prev["page"] == "search_results" and _keywords(content) == state["keywords"]:
            return "click[next >]" if content["page"] > state["results_page"] else "click[< prev]"
        return f"search[{' '.join(content['keywords'])}]"
    if page == "item_page":
        if prev["page"] == "search_results":
            return f"click[{content['asin'].lower()}]"
        if prev["page"] == "item_sub_page":
            return "click[< prev]"
        new = [v for k, v in content["options"].items() if state["options"].get(k) != v]
        return f"click[{new[0]}]" if new else "reload"
    if page == "item_sub_page":
        return f"click[{row['url'].split('/')[-2].lower()}]"
    return "click[buy now]"


def test_human_sessions_replay(shared_data, tmp_path):
    for name, rows in _sessions(shared_data):
        directory = write_catalogue(tmp_path / name, *_catalogue(rows))
        env = make_webshop(directory, split="test")
        obs, info = env.reset("0")
        assert rows[0]["page"] == "index" == info["page"]
        for prev, row in zip(rows, rows[1:]):
            action = _action(prev, row, info)
            obs, reward, done, info = env.step(action)
            content = row.get("content") or {}
            assert info["page"] == row["page"], (name, action)
            if row["page"] == "search_results":
                assert info["keywords"] == content["keywords"] and info["results_page"] == content["page"]
                assert ASIN.findall(obs) == content["search_result_asins"], (name, action)
            elif row["page"] in ("item_page", "item_sub_page"):
                assert info["asin"] == content["asin"] and info["options"] == content["options"], (name, action)
                assert info["keywords"] == _keywords(content) and info["results_page"] == int(content["page"])
            elif row["page"] == "done":
                assert done and info["asin"] == content["asin"] and info["options"] == content["options"]
                assert info["reward_info"]["price"] == content["price"]
                assert list(info["options"]) == list(content["options"])  # selection order kept
        assert rows[-1]["page"] == "done" and done
