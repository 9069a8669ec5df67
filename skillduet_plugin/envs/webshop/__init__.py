"""WebShop as a pure-Python text environment: official data files or a built-in synthetic catalogue.

``make_webshop(data_dir=None, split="test", ...)`` is what ``skillduet_plugin.envs.make("webshop", ...)`` calls;
``get_reward`` is the benchmark's purchase reward as a pure function.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from skillduet_plugin.envs.registry import register_env
from skillduet_plugin.envs.webshop import expert, prompts
from skillduet_plugin.envs.webshop.catalogue import (
    ATTRIBUTE_FILES, HUMAN_FILES, PRODUCT_FILES, Catalogue, find_file, load_catalogue, load_product,
)
from skillduet_plugin.envs.webshop.env import WebShopEnv, parse_action
from skillduet_plugin.envs.webshop.reward import get_reward, normalize_color, title_nouns
from skillduet_plugin.envs.webshop.synthetic import (catalogue_identity, ensure_default_data, generate_catalogue,
                                                     write_catalogue)


@register_env("webshop", prompts=prompts.TEMPLATES, format_observation=prompts.format_observation,
              format_actions=prompts.format_actions, free_text_actions=True, make_expert=expert.make_expert,
              default_panel="test",
              per_type_report=False,
              choose_kwargs={"search_choices": 8, "result_labels": True},
              default_data_identity=lambda: {"generated": catalogue_identity()}, task_types=("webshop",),
              description="WebShop: buy the product an instruction asks for (official data files or a built-in "
                          "synthetic catalogue); one task type unless the factory's scope= splits goals by category")
def make_webshop(data_dir: str | Path | None = None, split: str = "test", observation_mode: str = "text",
                 num_products: int | None = None, max_steps: int = 15, human_goals: bool = False,
                 scope: str = "webshop", show_attrs: bool = False, seed: int | None = None,
                 synthetic_num_products: int = 1000, synthetic_seed: int = 0, search_choices: int = 0,
                 result_labels: bool = False, **kwargs: Any) -> WebShopEnv:
    """Build a WebShop env over ``data_dir`` (official files) or, when None, the default synthetic catalogue.

    ``num_products`` keeps the first N products (as the benchmark); ``human_goals`` uses
    ``items_human_ins.json``; ``scope`` sets ``task_type``: ``"webshop"`` (one scope), ``"category"`` (the
    goal's coarse category, e.g. ``beauty``) or ``"product_category"`` (the first level of its category path).
    ``seed`` is accepted for parity with other envs and changes nothing: the goal panel is fixed.
    ``synthetic_num_products``/``synthetic_seed`` choose the generated catalogue when ``data_dir`` is None.
    ``search_choices=N`` lists up to N search queries built from the instruction as the search page's admissible
    actions (for choose mode) instead of ``search[<your query>]``; ``result_labels`` offers a results page's
    product links as ``click[item k]`` (its row) instead of ``click[<asin>]`` (on in choose mode: a tiny choosing
    policy then learns a row instead of copying an asin).
    """
    if kwargs:
        raise TypeError(f"make_webshop got unexpected keyword(s) {', '.join(sorted(kwargs))}")
    del seed  # the panel and the env are deterministic by design
    if data_dir is None:
        data_dir = ensure_default_data(synthetic_num_products, synthetic_seed)
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise FileNotFoundError(f"data_dir={data_dir} is not a directory: pass the folder holding the WebShop "
                                f"files, or data_dir=None for the synthetic catalogue")
    catalogue = load_catalogue(
        find_file(data_dir, PRODUCT_FILES, "product file"),
        find_file(data_dir, ATTRIBUTE_FILES, "attribute file"),
        find_file(data_dir, HUMAN_FILES, "human instruction file", required=human_goals),
        num_products=num_products, use_human_goals=human_goals,
    )
    return WebShopEnv(catalogue, split=split, observation_mode=observation_mode, max_steps=max_steps,
                      scope=scope, show_attrs=show_attrs, search_choices=search_choices,
                      result_labels=result_labels)


__all__ = [
    "Catalogue", "WebShopEnv", "ensure_default_data", "generate_catalogue", "get_reward", "load_catalogue",
    "load_product", "make_webshop", "normalize_color", "parse_action", "title_nouns", "write_catalogue",
]
