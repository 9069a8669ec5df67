"""Helpers for the WebShop tests: a scripted oracle shopper and small hand-made catalogues."""

from __future__ import annotations

import json
import lzma
from pathlib import Path
from typing import Any

from skillduet_plugin.envs.webshop import WebShopEnv


def load_vocabulary(shared_data: Path) -> list[dict[str, Any]]:
    """The records of the real ``items_ins_v2_1000.json`` (attributes + instructions), in file order."""
    with lzma.open(shared_data / "webshop" / "items_ins_v2_1000.json.xz", "rt", encoding="utf-8") as f:
        return list(json.load(f).values())


def run_oracle(env: WebShopEnv, task_id: str) -> tuple[float, bool, int]:
    """Search the instruction, page to the goal asin, click it, pick the goal options, buy.

    Returns (score, won, steps); (0.0, False, steps) if the goal product never shows up.
    """
    goal = env.goal(task_id)
    env.reset(task_id)
    obs, reward, done, info = env.step(f"search[{goal['instruction_text']}]")
    target = f"click[{goal['asin'].lower()}]"
    for _ in range(4):  # 50 results = 5 pages of 10
        if target in info["admissible_actions"]:
            break
        obs, reward, done, info = env.step("click[next >]")
    if target not in info["admissible_actions"]:
        return 0.0, False, info["step"]
    obs, reward, done, info = env.step(target)
    options = goal["goal_options"].values() if isinstance(goal["goal_options"], dict) else goal["goal_options"]
    for value in options:
        obs, reward, done, info = env.step(f"click[{value}]")
    obs, reward, done, info = env.step("click[buy now]")
    assert done
    return reward, info["won"], info["step"]


def tiny_raw_catalogue() -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Three hand-written products (a rug goal, a rug distractor, headphones) in the official raw schema."""
    products = [
        {"asin": "B0RUG00001", "name": "Turquoise Square Area Rug, Easy Clean Shag Rug for Living Room",
         "full_description": "A soft shag area rug that is easy clean.", "pricing": "$39.99",
         "small_description": ["Easy clean shag pile", "Non slip backing"], "images": ["img1"],
         "product_category": "Home & Kitchen › Home Décor Products › Area Rugs", "category": "garden",
         "query": "area rugs", "customization_options": {
             "Color": [{"value": "Turquoise", "image": None}, {"value": "Grey", "image": None}],
             "Size": [{"value": "5 ft x 7 ft", "image": None}, {"value": "8 ft x 10 ft", "image": None}]}},
        {"asin": "B0RUG00002", "name": "Modern Runner Rug for Hallway",
         "full_description": "A runner rug.", "pricing": "$59.00 - $80.00",
         "small_description": ["Low pile"], "images": ["img2"],
         "product_category": "Home & Kitchen › Home Décor Products › Area Rugs", "category": "garden",
         "query": "area rugs", "customization_options": {"Color": [{"value": "Blue/Grey", "image": None}]}},
        {"asin": "B0HEAD0001", "name": "Wireless Earbuds Bluetooth Headphones with Stereo Sound",
         "full_description": "Earbuds.", "pricing": "$25.50", "small_description": ["Stereo sound"],
         "images": ["img3"], "product_category": "Electronics › Headphones › Earbud Headphones",
         "category": "electronics", "query": "headphones", "customization_options": ""},
    ]
    attributes = {
        "B0RUG00001": {"attributes": ["easy clean", "living room", "non slip"],
                       "instruction": "Find me easy clean area rugs for living room",
                       "instruction_attributes": ["easy clean", "living room"]},
        "B0RUG00002": {"attributes": ["high density"]},
        "B0HEAD0001": {"attributes": ["stereo sound"]},
    }
    return products, attributes
