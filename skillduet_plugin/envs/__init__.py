"""Multi-turn text environments behind one contract: ``make(name, data_dir=..., split=..., **kw)``.

Each benchmark lives in its own module and is imported only when asked for, so ``alfworld`` need not be
installed to use WebShop.
"""

from __future__ import annotations

import importlib
from typing import Any

from skillduet_plugin.envs.base import REQUIRED_INFO_KEYS, TextEnv, check_info

# name -> "module:factory"; the factory takes (data_dir=None, split=..., **kw) and returns a TextEnv
ENV_REGISTRY: dict[str, str] = {
    "alfworld": "skillduet_plugin.envs.alfworld:make_alfworld",
    "webshop": "skillduet_plugin.envs.webshop:make_webshop",
}


def register_env(name: str, target: str) -> None:
    """Register a third-party env factory as ``"package.module:function"``."""
    ENV_REGISTRY[name] = target


def make(name: str, data_dir: str | None = None, split: str = "train", **kwargs: Any) -> TextEnv:
    """Build the environment ``name`` for ``split`` (see each env's factory for its own keywords)."""
    if name not in ENV_REGISTRY:
        raise KeyError(f"env={name!r} is unknown: registered environments are {', '.join(sorted(ENV_REGISTRY))}")
    module_name, _, attr = ENV_REGISTRY[name].partition(":")
    factory = getattr(importlib.import_module(module_name), attr)
    return factory(data_dir=data_dir, split=split, **kwargs)


__all__ = ["ENV_REGISTRY", "REQUIRED_INFO_KEYS", "TextEnv", "check_info", "make", "register_env"]
