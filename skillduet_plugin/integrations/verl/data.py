"""Builds the parquet datasets verl's ``RLHFDataset`` reads for the ``skillduet_agent`` loop: one row per task.

The prompt column is only a placeholder (the agent loop builds the real prompt from the environment); what
matters is ``extra_info.task_id``/``split`` and ``agent_name``. Usage::

    python -m skillduet_plugin.integrations.verl.data --env alfworld --out ~/data/skillduet/alfworld \\
        --train-split train --val-split valid_unseen
"""

from __future__ import annotations

import argparse
import os
from typing import Any, Sequence

from skillduet_plugin.core.registry import resolve_target
from skillduet_plugin.envs import make
from skillduet_plugin.integrations.verl import AGENT_LOOP_NAME


def task_rows(env_name: str, task_ids: Sequence[str], split: str) -> list[dict[str, Any]]:
    """Dataset rows for ``task_ids`` of ``split`` (in order; ``extra_info.index`` is the position)."""
    rows = []
    for index, task_id in enumerate(task_ids):
        rows.append({
            "data_source": f"skillduet/{env_name}",
            "agent_name": AGENT_LOOP_NAME,
            "prompt": [{"role": "user", "content": f"{env_name} task {task_id}"}],
            "reward_model": {"style": "env", "ground_truth": ""},
            "extra_info": {"index": index, "task_id": str(task_id), "split": split, "env": env_name},
        })
    return rows


def env_tasks(env_name: str, split: str, data_dir: str | None = None, factory: str | None = None,
              **env_kwargs: Any) -> list[str]:
    """The ordered task ids of an environment split (``factory``: ``"module:function"`` instead of ``make``)."""
    if factory:
        env = resolve_target(factory, "skillduet.env.factory")(data_dir=data_dir, split=split, **env_kwargs)
    else:

        env = make(env_name, data_dir=data_dir, split=split, **env_kwargs)
    try:
        return [str(t) for t in env.tasks]
    finally:
        env.close()


def write_parquet(rows: list[dict[str, Any]], path: str) -> str:
    import pandas as pd  # lazy: pandas (imports numpy)

    if not rows:
        raise ValueError(f"no tasks to write to {path}: the split is empty")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    pd.DataFrame(rows).to_parquet(path)
    return path


def build_dataset(env_name: str, out_dir: str, *, train_split: str = "train", val_split: str | None = None,
                  data_dir: str | None = None, factory: str | None = None, max_train: int | None = None,
                  max_val: int | None = None) -> dict[str, str]:
    """Write ``train.parquet`` (and ``test.parquet`` for ``val_split``) into ``out_dir``; returns the paths."""
    out = {}
    train = env_tasks(env_name, train_split, data_dir, factory)[:max_train]
    out["train"] = write_parquet(task_rows(env_name, train, train_split), os.path.join(out_dir, "train.parquet"))
    if val_split:
        val = env_tasks(env_name, val_split, data_dir, factory)[:max_val]
        out["test"] = write_parquet(task_rows(env_name, val, val_split), os.path.join(out_dir, "test.parquet"))
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", required=True, help="environment name (alfworld, webshop, ...)")
    parser.add_argument("--out", required=True, help="output folder for train.parquet / test.parquet")
    parser.add_argument("--data-dir", default=None, help="benchmark data folder (the env's default if omitted)")
    parser.add_argument("--train-split", default="train")
    parser.add_argument("--val-split", default=None, help="e.g. valid_unseen (ALFWorld) or test (WebShop)")
    parser.add_argument("--factory", default=None, help="'module:function' building the env instead of make()")
    parser.add_argument("--max-train", type=int, default=None)
    parser.add_argument("--max-val", type=int, default=None)
    args = parser.parse_args(argv)
    paths = build_dataset(args.env, os.path.expanduser(args.out), train_split=args.train_split,
                          val_split=args.val_split, data_dir=args.data_dir, factory=args.factory,
                          max_train=args.max_train, max_val=args.max_val)
    for name, path in paths.items():
        print(f"{name}: {path}")


if __name__ == "__main__":
    main()
