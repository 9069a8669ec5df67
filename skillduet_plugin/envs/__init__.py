"""Multi-turn text environments behind one contract: ``make(name, data_dir=..., split=..., **kw)``.

Each environment is a package here (``alfworld``, ``webshop``, ``toy``) whose factory carries
``@register_env(name, ...)`` (see :mod:`skillduet_plugin.envs.registry`); the packages are imported on the first
lookup, and each benchmark's engine only when an env of it is made, so ``alfworld`` need not be installed to use
WebShop.
"""

from __future__ import annotations

from typing import Any

from skillduet_plugin.envs.base import REQUIRED_INFO_KEYS, TextEnv, check_info
from skillduet_plugin.envs.registry import ENVS, EnvSpec, env_names, env_spec, register_env


def make(name: str, data_dir: str | None = None, split: str = "train", **kwargs: Any) -> TextEnv:
    """Build the environment ``name`` for ``split`` (see each env's factory for its own keywords)."""
    return env_spec(name).factory(data_dir=data_dir, split=split, **kwargs)


__all__ = ["ENVS", "EnvSpec", "REQUIRED_INFO_KEYS", "TextEnv", "check_info", "env_names", "env_spec", "make",
           "register_env"]
