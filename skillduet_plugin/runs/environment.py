"""Environment plumbing shared by training, the warm start and evaluation: the env keywords of a run config
for a split, and building an env or a pool from them."""

from __future__ import annotations

from typing import Any

from skillduet_plugin.envs import make
from skillduet_plugin.envs.pool import EnvPool
from skillduet_plugin.envs.registry import env_spec
from skillduet_plugin.runs.config import RunConfig


def env_kwargs(config: RunConfig, split: str, limit: int = 0) -> dict[str, Any]:
    """Keywords for ``envs.make(config.env, **kw)`` (and ``EnvPool(env_kwargs=kw)``): data folder (None: the
    generated ALFWorld games / the synthetic WebShop catalogue), split, first ``limit`` tasks (0: all), the env's
    choose-mode keywords (WebShop's search choices) when the policy chooses, the ``task_types`` kept, then the
    config's own ``env_kwargs``."""
    kw: dict[str, Any] = {"data_dir": config.data_dir, "split": split}
    spec = env_spec(config.env)
    if limit and spec.data.limit_keyword:  # envs without one are cut by the callers (env.tasks[:limit])
        kw[spec.data.limit_keyword] = int(limit)
    if config.action_mode == "choose":
        kw.update(spec.actions.choose_kwargs)  # e.g. WebShop: search with queries built from the instruction
    if config.task_type_list:  # validated against the env's task types (RunConfig.validate)
        kw["task_types"] = config.task_type_list
    kw.update(config.env_kwargs)
    return kw


def data_identity(config: RunConfig, split: str) -> dict[str, Any]:
    """What a run's data of ``split`` is, for cache keys: the env, its keywords, and where they name no data
    folder, the generated data behind them (ALFWorld: the generator's code and engine versions, or the
    ``$ALFWORLD_DATA`` folder; WebShop: the synthetic catalogue's generator version and code)."""
    kw = env_kwargs(config, split)
    identity: dict[str, Any] = {"env": config.env, **kw}
    default_identity = env_spec(config.env).data.default_data_identity
    if kw.get("data_dir") is None and default_identity is not None:
        identity.update(default_identity())
    return identity


def make_env(config: RunConfig, split: str, limit: int = 0) -> Any:

    kw = env_kwargs(config, split, limit)
    return make(config.env, **kw)


def make_pool(config: RunConfig, split: str, limit: int = 0) -> Any:

    return EnvPool(config.env, num_workers=config.env_workers, env_kwargs=env_kwargs(config, split, limit))


def interleave_by_type(env: Any, tasks: list[str], limit: int = 0) -> list[str]:
    """Tasks reordered round-robin over their types (stable within a type); the first ``limit`` (0: all)."""
    by_type: dict[str, list[str]] = {}
    for t in tasks:
        try:
            key = str(env.task_type(t))
        except (NotImplementedError, KeyError, ValueError):
            key = ""
        by_type.setdefault(key, []).append(t)
    order: list[str] = []
    queues = [list(v) for v in by_type.values()]
    while any(queues):
        for q in queues:
            if q:
                order.append(q.pop(0))
    return order[:limit] if limit else order
