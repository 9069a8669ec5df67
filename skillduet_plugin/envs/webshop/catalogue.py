"""Load a WebShop catalogue from the official files and build its goals, price table and search index.

Files (in a data directory): the raw products (``items_shuffle_1000.json`` or ``items_shuffle.json``), the
per-asin attributes and synthetic instructions (``items_ins_v2_1000.json`` / ``items_ins_v2.json``) and,
for human goals, ``items_human_ins.json``; ``.json.xz`` variants are read too. Products are normalised the
way the benchmark does (``Title``, ``BulletPoints``, ``Description``, lowercased options, parsed pricing).

Goals follow the benchmark: synthetic goals are every product instruction x every option combination, with a
price upper bound drawn from the four $10 steps above the product's price; the goal list is shuffled with
seed 233. Unlike the benchmark (which draws prices from the unseeded global RNG), price draws use a fixed
seeded RNG, so the goal panel is identical in every process. Catalogues are cached per process.
"""

from __future__ import annotations

import itertools
import json
import lzma
import random
import re
import threading
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from skillduet_plugin.envs.webshop.search import BM25Index

GOAL_SHUFFLE_SEED = 233
PRICE_SEED = 233
PRICE_STEPS = [10.0 * i for i in range(1, 100)]
NO_PRICE_LIMIT = 1_000_000
PRODUCT_FILES = ("items_shuffle_1000.json", "items_shuffle.json")
ATTRIBUTE_FILES = ("items_ins_v2_1000.json", "items_ins_v2.json")
HUMAN_FILES = ("items_human_ins.json",)


def read_json(path: str | Path) -> Any:
    """Read ``.json`` or ``.json.xz``."""
    path = Path(path)
    if path.suffix == ".xz":
        with lzma.open(path, "rt", encoding="utf-8") as f:
            return json.load(f)
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def find_file(data_dir: str | Path, names: tuple[str, ...], what: str, required: bool = True) -> Path | None:
    """The first of ``names`` (or its ``.xz``) present in ``data_dir``."""
    for name in names:
        for candidate in (Path(data_dir) / name, Path(data_dir) / f"{name}.xz"):
            if candidate.is_file():
                return candidate
    if required:
        raise FileNotFoundError(f"no {what} in data_dir={data_dir}: expected one of {', '.join(names)} "
                                f"(or .xz); pass data_dir=None to use the built-in synthetic catalogue")
    return None


def parse_pricing(pricing: Any) -> tuple[list[float], str]:
    """Raw ``"$12.99"`` / ``"$10.99 - $15.99"`` / ``""`` -> (floats, displayed price tag)."""
    if isinstance(pricing, list) and pricing and all(isinstance(p, (int, float)) for p in pricing):
        values = [float(p) for p in pricing[:2]]
    elif not pricing:
        return [100.0], "$100.0"
    else:
        values = [float(Decimal(re.sub(r"[^\d.]", "", part))) for part in str(pricing).split("$")[1:]][:2]
    if len(values) == 1:
        return values, f"${values[0]}"
    return values, f"${values[0]} to ${values[1]}"


def load_product(raw: dict[str, Any], attributes: dict[str, Any] | None = None) -> dict[str, Any]:
    """A raw catalogue item in the benchmark's loaded form (raw keys kept, display keys added)."""
    product = dict(raw)
    missing = [k for k in ("asin", "name", "query", "product_category") if k not in raw]
    if missing:
        raise KeyError(f"product {raw.get('asin', '?')} misses {', '.join(missing)} (raw WebShop item schema)")
    product["Title"] = raw["name"]
    product["Description"] = raw.get("full_description") or ""
    bullets = raw.get("small_description") or []
    product["BulletPoints"] = bullets if isinstance(bullets, list) else [bullets]
    product["pricing"], product["Price"] = parse_pricing(raw.get("pricing"))
    reviews = raw.get("reviews") or raw.get("Reviews") or []
    product["Reviews"] = reviews
    product["Rating"] = raw.get("average_rating", raw.get("Rating", "N.A."))
    options: dict[str, list[str]] = {}
    option_to_image: dict[str, Any] = {}
    for name, contents in (raw.get("customization_options") or {}).items():
        if contents is None:
            continue
        values = []
        for content in contents:
            value = content["value"].strip().replace("/", " | ").lower()
            values.append(value)
            option_to_image[value] = content.get("image")
        options[name.lower()] = values
    if "options" in raw and not raw.get("customization_options"):
        options = {k.lower(): list(v) for k, v in raw["options"].items()}
    product["options"] = options
    product["option_to_image"] = option_to_image
    attrs = (attributes or {}).get("attributes") or raw.get("Attributes") or raw.get("attributes")
    product["Attributes"] = list(attrs) if attrs else ["DUMMY_ATTR"]
    images = raw.get("images") or [""]
    product["MainImage"] = images[0]
    product["query"] = raw["query"].lower().strip()
    product.setdefault("category", "")
    return product


def product_document(product: dict[str, Any]) -> str:
    """The searchable text of a product: title, description, first feature and options, lowercased."""
    option_text = ", and ".join(f"{name}: {', '.join(values)}" for name, values in product["options"].items())
    first_bullet = product["BulletPoints"][0] if product["BulletPoints"] else ""
    return " ".join([product["Title"], product["Description"], first_bullet, option_text]).lower()


def _price_upper(price: float, rng: random.Random) -> tuple[float, str]:
    steps = [p for p in PRICE_STEPS if p > price][:4]
    if len(steps) < 2:
        return NO_PRICE_LIMIT, ""
    _, upper = sorted(rng.sample(steps, 2))
    return upper, f", and price lower than {upper:.2f} dollars"


def synthetic_goals(products: list[dict[str, Any]], prices: dict[str, float],
                    rng: random.Random) -> list[dict[str, Any]]:
    """Instruction x option-combination goals of every product with an instruction, weighted by attribute rarity."""
    goals: list[dict[str, Any]] = []
    attribute_counts: dict[str, int] = {}
    for product in products:
        instruction = product.get("instruction_text")
        if not instruction:
            continue
        attributes = product["instruction_attributes"]
        if not attributes:
            raise ValueError(f"product {product['asin']} has an instruction but no instruction_attributes")
        price_upper, price_text = _price_upper(prices[product["asin"]], rng)
        names = sorted(product["options"])
        for combination in itertools.product(*(product["options"][n] for n in names)):
            goal_options = dict(zip(names, combination))
            option_text = ", and ".join(f"{k}: {v}" for k, v in goal_options.items())
            option_text = f" with {option_text}" if option_text else ""
            goals.append({
                "asin": product["asin"], "category": product["category"], "query": product["query"],
                "name": product["Title"], "product_category": product["product_category"],
                "instruction_text": f"{instruction}{option_text}{price_text}",
                "attributes": list(attributes), "price_upper": price_upper, "goal_options": goal_options,
            })
            for attribute in attributes:
                attribute_counts[attribute] = attribute_counts.get(attribute, 0) + 1
    for goal in goals:
        goal["weight"] = sum(1.0 / attribute_counts[a] for a in goal["attributes"]) / len(goal["attributes"])
    return goals


def human_goals(products: list[dict[str, Any]], prices: dict[str, float],
                rng: random.Random) -> list[dict[str, Any]]:
    """Goals from human-written instructions (``items_human_ins.json``); entries without attributes are skipped."""
    goals = []
    for product in products:
        for entry in product.get("instructions") or []:
            attributes = entry.get("instruction_attributes") or []
            if not attributes:
                continue
            price_upper, price_text = _price_upper(prices[product["asin"]], rng)
            goals.append({
                "asin": product["asin"], "category": product["category"], "query": product["query"],
                "name": product["Title"], "product_category": product["product_category"],
                "instruction_text": entry["instruction"].strip(".") + price_text,
                "attributes": list(attributes), "price_upper": price_upper,
                "goal_options": list(entry.get("instruction_options") or []), "weight": 1,
            })
    return goals


@dataclass
class Catalogue:
    """Products (loaded form), realised prices, the shuffled goal list and the search index."""

    products: list[dict[str, Any]]
    goals: list[dict[str, Any]]
    prices: dict[str, float]
    index: BM25Index
    by_asin: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.by_asin = {p["asin"]: p for p in self.products}

    def search(self, query: str, k: int = 50) -> list[dict[str, Any]]:
        """Top-``k`` products for ``query`` (BM25)."""
        return [self.products[i] for i in self.index.search(query, k)]


def build_catalogue(raw_products: list[dict[str, Any]], attributes: dict[str, dict[str, Any]],
                    human_instructions: dict[str, list[dict[str, Any]]] | None = None,
                    num_products: int | None = None, use_human_goals: bool = False) -> Catalogue:
    """Normalise products, draw prices, build goals (shuffled with seed 233) and the search index."""
    if use_human_goals and human_instructions is None:
        raise ValueError("human_goals=True needs items_human_ins.json in data_dir")
    if num_products is not None:
        raw_products = raw_products[:num_products]
    products, seen = [], set()
    for raw in raw_products:
        asin = raw.get("asin")
        if not asin or asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        entry = attributes.get(asin, {})
        product = load_product(raw, entry)
        product["instruction_text"] = entry.get("instruction")
        product["instruction_attributes"] = entry.get("instruction_attributes")
        if human_instructions is not None and asin in human_instructions:
            product["instructions"] = human_instructions[asin]
        products.append(product)
    if not products:
        raise ValueError("the catalogue has no usable products (asin missing, 'nan' or longer than 10 chars)")

    rng = random.Random(PRICE_SEED)
    prices = {}
    for product in products:
        pricing = product["pricing"]
        price = pricing[0] if len(pricing) == 1 else rng.uniform(*pricing[:2])
        prices[product["asin"]] = price
        product["price"] = price
    goals = (human_goals if use_human_goals else synthetic_goals)(products, prices, rng)
    random.Random(GOAL_SHUFFLE_SEED).shuffle(goals)
    index = BM25Index([product_document(p) for p in products])
    return Catalogue(products=products, goals=goals, prices=prices, index=index)


_CACHE: dict[tuple, Catalogue] = {}
_CACHE_LOCK = threading.Lock()


def load_catalogue(product_path: str | Path, attribute_path: str | Path, human_path: str | Path | None = None,
                   num_products: int | None = None, use_human_goals: bool = False) -> Catalogue:
    """Load (once per process and file version) the catalogue of these files."""
    paths = [Path(p).resolve() for p in (product_path, attribute_path, human_path) if p is not None]
    key = (tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in paths), num_products, use_human_goals)
    with _CACHE_LOCK:
        if key not in _CACHE:
            human = read_json(human_path) if (use_human_goals and human_path is not None) else None
            _CACHE[key] = build_catalogue(read_json(product_path), read_json(attribute_path), human,
                                          num_products=num_products, use_human_goals=use_human_goals)
        return _CACHE[key]
