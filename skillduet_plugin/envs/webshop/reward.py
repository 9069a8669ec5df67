"""WebShop's purchase reward: attribute, option, price and product-type matching, as the benchmark scores it.

``reward = (n_attr_matched + n_option_matched + [price <= price_upper]) / (n_attrs + n_options + 1) * r_type``.
Attributes match by ``thefuzz`` token-set ratio > 85 against the product's attribute list, else by substring of
its title, features or description; options are colour-normalised, then matched exactly (``size``) or by
token-set ratio > 85, else by substring of the product texts. ``r_type`` follows the benchmark's rules on the
query, shared ``product_category`` levels and the title "noun" overlap.

Title nouns: the benchmark tags titles with a spaCy English model (NOUN/PROPN tokens). No spaCy model is
available offline, so :func:`title_nouns` is a documented heuristic instead: lowercase word tokens with at least
one letter, minus English function words, a short list of frequent product-title adjectives and tokens with
adjective suffixes (-able, -ible, -ful, -less, -ous, -ive, -ish). spaCy itself gives different tags across model
versions, so ``title_score`` (and rarely ``r_type``) can differ from a spaCy run; the other terms are exact.

Two behaviours of the benchmark are kept on purpose: the title-score denominator counts repeated goal nouns,
and a purchased option that is not a goal option but appears in the product texts still counts as matched, so
goals naming fewer options than the product offers can score above 1.0 (success requires exactly 1.0).
"""

from __future__ import annotations

import re
from typing import Any

from skillduet_plugin.envs.webshop.catalogue import load_product

try:
    from thefuzz import fuzz
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError("the WebShop reward needs thefuzz: pip install 'skillduet[webshop]'") from exc

EXACT_MATCH_OPTIONS = ("size",)
FUZZY_THRESHOLD = 85

# Colour words the benchmark maps option values onto (first one contained in the value wins, list order).
COLOR_SET = (
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure", "banana", "beige", "black", "blue", "blush",
    "bordeaux", "bronze", "brown", "burgundy", "camel", "camo", "caramel", "champagne", "charcoal", "cheetah",
    "chestnut", "chocolate", "christmas", "coffee", "cognac", "copper", "coral", "cranberry", "cream", "crystal",
    "dark", "denim", "eggplant", "elephant", "espresso", "fuchsia", "gold", "granite", "grape", "graphite",
    "grass", "gray", "green", "grey", "heather", "indigo", "ivory", "ivy", "khaki", "lavender", "lemon",
    "leopard", "light", "lilac", "lime", "magenta", "maroon", "mauve", "merlot", "midnight", "mint", "mocha",
    "multicolor", "mushroom", "mustard", "natural", "navy", "nude", "olive", "orange", "peach", "pewter", "pink",
    "plum", "purple", "rainbow", "red", "rose", "royal", "rust", "sand", "sapphire", "seashell", "silver",
    "skull", "slate", "steel", "stone", "stonewash", "sunflower", "tan", "taupe", "teal", "tiger", "turquoise",
    "violet", "walnut", "wheat", "white", "wine", "yellow",
)

_FUNCTION_WORDS = frozenset("""
a about above after again against all also am an and any are as at be because been before being below between
both but by can could did do does doing down during each either few for from further had has have having he her
here hers him his how i if in into is it its itself just may me might more most my neither no nor not now of off
on once only or other our ours out over own per plus same she should so some such than that the their them then
there these they this those through to too under until up upon us very via was we were what when where which
while who whom why will with within without would you your yours w x vs etc
""".split())

# Frequent descriptive words in product titles that a POS tagger labels ADJ (or VERB) rather than NOUN.
_TITLE_ADJECTIVES = frozenset("""
new best premium professional portable compatible adjustable durable soft large small mini big extra super ultra
high low long short wide narrow thick thin heavy light lightweight deep tall slim full half double single
multi natural organic original classic modern vintage retro cute funny cool warm hot cold dry wet fresh clean
pure real true easy quick fast slow smart automatic electric digital wireless cordless waterproof
non anti unisex casual formal elegant simple fancy luxury cheap safe strong solid hard flat round square
old young little pretty beautiful gorgeous perfect great good nice fine stylish decorative handmade assorted
upholstered scrolled breathable removable reusable washable rechargeable foldable stackable
""".split())

_ADJECTIVE_SUFFIXES = ("able", "ible", "ful", "less", "ous", "ive", "ish")
_TOKEN = re.compile(r"[a-z0-9]+(?:['’][a-z]+)?")


def normalize_color(value: str) -> str:
    """The first colour of :data:`COLOR_SET` contained in ``value``, else ``value`` unchanged."""
    for color in COLOR_SET:
        if color in value:
            return color
    return value


def title_nouns(title: str) -> list[str]:
    """Noun-like tokens of a product title in order, repeats kept (the heuristic stand-in for spaCy tags)."""
    nouns = []
    for token in _TOKEN.findall(title.lower()):
        token = re.sub(r"['’]s$", "", token)
        if not any(c.isalpha() for c in token) or len(token) < 2:
            continue
        if token in _FUNCTION_WORDS or token in _TITLE_ADJECTIVES:
            continue
        if len(token) > 5 and token.endswith(_ADJECTIVE_SUFFIXES):
            continue
        nouns.append(token)
    return nouns


def _category_levels(product_category: str) -> set[str]:
    return {level.strip() for level in product_category.split("›")}


def get_type_reward(product: dict[str, Any], goal: dict[str, Any]) -> dict[str, Any]:
    """``r_type`` plus its evidence: query equality, >= 2 shared category levels, title-noun overlap."""
    query_match = product.get("query", "") == goal.get("query", "")
    category_match = len(_category_levels(product.get("product_category", ""))
                         & _category_levels(goal.get("product_category", ""))) >= 2
    purchased = title_nouns(product.get("name") or product.get("Title", ""))
    desired = title_nouns(goal.get("name", ""))
    # the denominator counts repeated goal nouns, the numerator distinct shared ones (benchmark behaviour)
    title_score = 0.2 if not desired else len(set(purchased) & set(desired)) / len(desired)
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return {"r_type": r_type, "query_match": query_match, "category_match": category_match,
            "title_score": title_score}


def _product_texts(product: dict[str, Any]) -> tuple[str, str, str]:
    return (product["Title"].lower(), " ".join(product["BulletPoints"]).lower(), product["Description"].lower())


def get_attribute_reward(product: dict[str, Any], goal: dict[str, Any]) -> tuple[float, int]:
    """(fraction, count) of goal attributes found in the product's attributes or texts."""
    texts = _product_texts(product)
    matches = 0
    for g_attr in goal["attributes"]:
        if any(fuzz.token_set_ratio(p_attr, g_attr) > FUZZY_THRESHOLD for p_attr in product["Attributes"]):
            matches += 1
        elif any(g_attr in text for text in texts):
            matches += 1
    return matches / len(goal["attributes"]), matches


def get_option_reward(product: dict[str, Any], goal_options: list[str],
                      selected_options: dict[str, str]) -> tuple[float | None, int]:
    """(fraction or None without goal options, count) of selected options that match a goal option."""
    selected = {name: normalize_color(value) for name, value in selected_options.items()}
    wanted = [normalize_color(o) for o in goal_options]
    texts = _product_texts(product)
    matches = 0
    for name, value in selected.items():
        if name.lower() in EXACT_MATCH_OPTIONS:
            matched = value in wanted
        else:
            matched = any(fuzz.token_set_ratio(g, value) > FUZZY_THRESHOLD for g in wanted)
        if matched or any(value in text for text in texts):
            matches += 1
    return (matches / len(wanted) if wanted else None), matches


def get_reward(goal: dict[str, Any], product: dict[str, Any], selected_options: dict[str, str],
               price: float | None = None) -> tuple[float, dict[str, Any]]:
    """Score buying ``product`` with ``selected_options`` for ``goal``; returns (reward, breakdown).

    ``goal`` is a WebShop goal (``attributes``, ``goal_options`` (dict or list), ``price_upper``, ``query``,
    ``product_category``, ``name``); ``product`` a catalogue product, raw (``name``, ``small_description``,
    ``full_description``, ``pricing``...) or loaded (``Title``, ``BulletPoints``, ``Description``,
    ``Attributes``). ``price`` defaults to the product's realised ``price``, else the low end of its pricing.
    The breakdown carries the benchmark's ``r_type, r_att, w_att, query_match, category_match, title_score``,
    ``r_option, w_option`` (with goal options) and ``r_price, w_price``, plus the match counts.
    """
    if "Title" not in product:
        product = load_product(product)
    if not goal.get("attributes"):
        raise ValueError("goal['attributes'] must be a non-empty list (WebShop goals always name attributes)")
    if price is None:
        price = product["price"] if "price" in product else product["pricing"][0]
    goal_options = goal.get("goal_options") or []
    goal_option_values = list(goal_options.values()) if isinstance(goal_options, dict) else list(goal_options)
    price_upper = float(goal.get("price_upper", 1_000_000))

    type_info = get_type_reward(product, goal)
    r_price = price <= price_upper if price_upper > 0 else None
    r_att, n_attr = get_attribute_reward(product, goal)
    r_option, n_option = get_option_reward(product, goal_option_values, selected_options)

    denominator = len(goal["attributes"]) + len(goal_option_values) + 1
    reward = (n_attr + n_option + bool(r_price)) / denominator * type_info["r_type"]

    breakdown: dict[str, Any] = {
        "r_type": type_info["r_type"], "r_att": r_att, "w_att": len(goal["attributes"]) / denominator,
        "query_match": type_info["query_match"], "category_match": type_info["category_match"],
        "title_score": type_info["title_score"],
    }
    if r_option is not None:
        breakdown["r_option"] = r_option
        breakdown["w_option"] = len(goal_option_values) / denominator
    if r_price is not None:
        breakdown["r_price"] = r_price
        breakdown["w_price"] = 1 / denominator
    breakdown.update(n_attr_matched=n_attr, n_option_matched=n_option, price=price)
    return reward, breakdown
