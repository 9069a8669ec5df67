"""A deterministic synthetic WebShop catalogue in the official raw schema, the default data without a data dir.

``generate_catalogue(num_products, seed)`` draws products from :mod:`synthetic_types` (titles, features,
descriptions, options, prices, some reviews) and gives about 41% of them a "Find me ..." instruction, as the
benchmark's 1,000-product attribute file does. Passing ``vocabulary`` (records shaped like the values of
``items_ins_v2_1000.json``: ``attributes``, optional ``instruction`` + ``instruction_attributes``) builds one
product per record around its real attributes and instruction instead. ``ensure_default_data`` writes the
default catalogue once under ``$SKILLDUET_CACHE`` (or ``~/.cache/skillduet``), complete or absent.
"""

from __future__ import annotations

import json
import os
import random
import re
import string
import tempfile
from pathlib import Path
from typing import Any

from skillduet_plugin.core.artefacts import building, code_digest, read_marker
from skillduet_plugin.envs.webshop.synthetic_types import OPTION_NAMES, OPTION_POOLS, PRODUCT_TYPES

GENERATOR_VERSION = 1  # bump on any change to the generated data: it names the cache folder
INSTRUCTION_RATIO = 0.415
_SYLLABLES = ["vel", "or", "na", "lux", "ka", "mi", "zen", "tro", "qui", "bel", "sa", "ro", "fi", "dex", "lo",
              "ma", "ne", "ti", "gra", "von", "ar", "cel", "do", "ri", "sky", "bo", "ly", "ta"]
_OPENERS = ["Designed for everyday use.", "Makes a great gift.", "Backed by a 30-day satisfaction guarantee.",
            "Carefully packed and shipped fast.", "Loved by thousands of customers."]


def _brand(rng: random.Random) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()


def _asin(rng: random.Random, used: set[str]) -> str:
    while True:
        asin = "B0" + "".join(rng.choice(string.ascii_uppercase + string.digits) for _ in range(8))
        if asin not in used:
            used.add(asin)
            return asin


def _title_case(text: str) -> str:
    return " ".join(w[:1].upper() + w[1:] for w in text.split())


def _options(ptype: dict[str, Any], rng: random.Random) -> dict[str, list[dict[str, Any]]]:
    """A subset of each option group of the type, published under distinct raw option names."""
    if rng.random() < 0.15:
        return {}
    published: dict[str, list[dict[str, Any]]] = {}
    seen: set[str] = set()
    for pool_name in ptype["options"]:
        pool = OPTION_POOLS[pool_name]
        count = min(len(pool), rng.randint(2, 5))
        start = rng.randrange(0, len(pool) - count + 1)
        values = [v for v in (pool[start:start + count] if pool_name != "Color" else rng.sample(pool, count))
                  if v not in seen]
        seen.update(values)
        name = OPTION_NAMES[pool_name]
        for fallback in (name, "Style", "Pattern Name"):
            if fallback not in published:
                name = fallback
                break
        published[name] = [{"value": v, "image": None} for v in values]
    return published


def _pricing(low: float, high: float, rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.02:
        return ""
    price = round(rng.uniform(low, high)) - rng.choice([0.01, 0.05, 0.51])
    price = max(price, 0.99)
    if roll < 0.14:
        return f"${price:.2f} - ${price * rng.uniform(1.1, 1.6):.2f}"
    return f"${price:.2f}"


def _instruction(query: str, attributes: list[str], rng: random.Random) -> str:
    """A "Find me <attrs> <query> with <attrs> for <attrs>" instruction like the benchmark's synthetic ones."""
    cut1 = rng.randint(0, len(attributes))
    cut2 = rng.randint(cut1, len(attributes))
    pre, with_, for_ = attributes[:cut1], attributes[cut1:cut2], attributes[cut2:]
    text = "Find me " + (", ".join(pre) + " " if pre else "") + query
    if with_:
        text += " with " + ", ".join(with_)
    if for_:
        text += " for " + ", ".join(for_)
    return text


def parse_instruction(instruction: str, attributes: list[str]) -> str | None:
    """The product query inside a "Find me ..." instruction built from ``attributes`` (None if it does not parse)."""
    text = re.sub(r"^find me\s+", "", instruction.strip(), flags=re.I)
    by_length = sorted(set(attributes), key=len, reverse=True)
    while True:  # leading attributes: "a1, a2 a3 <query>"
        for attr in by_length:
            if text.startswith(attr + ", "):
                text = text[len(attr) + 2:]
                break
            if text.startswith(attr + " "):
                text = text[len(attr) + 1:]
                by_length = []
                break
        else:
            break
    for match in re.finditer(r" (with|for) ", text):
        rest = re.split(r", | with | for ", text[match.end():])
        if all(part in attributes for part in rest):
            return text[:match.start()].strip() or None
    return text.strip() or None


def _closest_type(query: str, rng: random.Random) -> dict[str, Any]:
    words = set(re.findall(r"[a-z]+", query.lower()))
    scored = [(len(words & set(re.findall(r"[a-z]+", (t["query"] + " " + t["noun"] + " " + t["product_category"])
                                          .lower()))), i) for i, t in enumerate(PRODUCT_TYPES)]
    best = max(scored)[0]
    candidates = [i for score, i in scored if score == best]
    return PRODUCT_TYPES[rng.choice(candidates)]


def _product(asin: str, ptype: dict[str, Any], query: str, attributes: list[str], rng: random.Random,
             noun: str | None = None) -> dict[str, Any]:
    brand = _brand(rng)
    title_attrs = [a for a in attributes if rng.random() < 0.7]
    noun = noun or ptype["noun"]
    title = f"{brand} {_title_case(', '.join(title_attrs[:2]))} {noun}".replace("  ", " ")
    if len(title_attrs) > 2:
        title += " with " + _title_case(", ".join(title_attrs[2:]))
    title += f" - {_title_case(query)}" if query.lower() not in title.lower() else ""
    bullets = [f"{_title_case(a)}: this {noun.lower()} is {a} and built to last." for a in attributes[:5]]
    bullets = bullets or [f"Quality {noun.lower()} from {brand}."]
    description = (f"The {brand} {noun.lower()} is a {', '.join(attributes) or 'practical'} choice for "
                   f"{query}. {rng.choice(_OPENERS)}")
    reviews = [{"title": rng.choice(["Great value", "Works as described", "Not bad", "Love it"]),
                "score": rng.randint(2, 5), "body": f"The {noun.lower()} arrived quickly and looks nice."}
               for _ in range(rng.choice([0, 0, 1, 2, 3]))]
    product = {
        "asin": asin, "name": title, "full_description": description, "small_description": bullets,
        "pricing": _pricing(*ptype["price"], rng), "images": [f"https://images.invalid/webshop/{asin}.jpg"],
        "product_category": f"{ptype['product_category'].rsplit(' › ', 1)[0]} › {_title_case(query)}"
        if noun != ptype["noun"] else ptype["product_category"],
        "customization_options": _options(ptype, rng), "category": ptype["category"], "query": query,
    }
    if reviews:
        product["reviews"] = reviews
        product["average_rating"] = round(sum(r["score"] for r in reviews) / len(reviews), 1)
    return product


def generate_catalogue(num_products: int = 1000, seed: int = 0,
                       vocabulary: list[dict[str, Any]] | None = None
                       ) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """(raw products, attributes by asin) in the official file schemas; same arguments give the same output."""
    if num_products < 1:
        raise ValueError(f"num_products={num_products} must be >= 1")
    rng = random.Random(seed)
    used: set[str] = set()
    products, attributes = [], {}
    for record in (vocabulary or [])[:num_products]:
        asin = _asin(rng, used)
        attrs = list(record.get("attributes") or [])
        instruction = record.get("instruction")
        goal_attrs = list(record.get("instruction_attributes") or [])
        query = parse_instruction(instruction, goal_attrs) if instruction else None
        if query:
            ptype = _closest_type(query, rng)
            product = _product(asin, ptype, query, list(dict.fromkeys(goal_attrs + attrs)), rng,
                               noun=_title_case(query))
            attributes[asin] = {"attributes": attrs, "instruction": instruction,
                                "instruction_attributes": goal_attrs}
        else:
            ptype = rng.choice(PRODUCT_TYPES)
            pool = rng.sample(ptype["attributes"], rng.randint(2, 4))
            product = _product(asin, ptype, ptype["query"], list(dict.fromkeys(pool + attrs)), rng)
            attributes[asin] = {"attributes": attrs or pool}
        products.append(product)
    while len(products) < num_products:
        asin = _asin(rng, used)
        ptype = rng.choice(PRODUCT_TYPES)
        attrs = rng.sample(ptype["attributes"], rng.randint(2, min(5, len(ptype["attributes"]))))
        products.append(_product(asin, ptype, ptype["query"], attrs, rng))
        attributes[asin] = {"attributes": attrs}
        if vocabulary is None and rng.random() < INSTRUCTION_RATIO:
            goal_attrs = rng.sample(attrs, rng.randint(2, len(attrs)))
            attributes[asin].update(instruction=_instruction(ptype["query"], goal_attrs, rng),
                                    instruction_attributes=goal_attrs)
    return products, attributes


def default_cache_dir() -> Path:
    """``$SKILLDUET_CACHE`` or ``~/.cache/skillduet``."""
    return Path(os.environ.get("SKILLDUET_CACHE") or Path.home() / ".cache" / "skillduet")


def _write_json_atomic(path: Path, data: Any) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_catalogue(directory: str | Path, products: list[dict[str, Any]],
                    attributes: dict[str, dict[str, Any]]) -> Path:
    """Write ``items_shuffle_1000.json`` + ``items_ins_v2_1000.json`` into ``directory`` (atomically)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    _write_json_atomic(directory / "items_ins_v2_1000.json", attributes)
    _write_json_atomic(directory / "items_shuffle_1000.json", products)  # written last: marks completion
    return directory


def catalogue_identity() -> dict[str, Any]:
    """The generator's version and code digest (with the size and seed, a generated catalogue's key)."""

    return {"version": GENERATOR_VERSION, "code": code_digest("skillduet_plugin.envs.webshop.synthetic",
                                                              "skillduet_plugin.envs.webshop.synthetic_types")}


def ensure_default_data(num_products: int = 1000, seed: int = 0, cache_dir: str | Path | None = None) -> Path:
    """The directory of the default synthetic catalogue, generated on first use: complete or absent
    (``artefacts.building``: written beside it, verified by its files' sha256, fsynced, renamed into place), so
    a generation killed midway is regenerated, never read."""

    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    identity = catalogue_identity()
    directory = (root / "webshop_synthetic" /
                 f"v{GENERATOR_VERSION}-n{num_products}-seed{seed}-{identity['code'][:12]}")
    key = {"artefact": "webshop-catalogue", "num_products": num_products, "seed": seed, **identity}
    if read_marker(directory, key) is None:
        with building(directory, key) as tmp:
            write_catalogue(tmp, *generate_catalogue(num_products, seed))
    return directory
