"""``skillduet train``'s presets per environment, registered by the run tooling against the environment's name.

What a run changes for an environment belongs to runs/, not to the environment package (an environment says what
it is; how the CPU demo plays it is a run setting). :func:`register_run_defaults` adds a preset for any
registered environment, a third-party one included; ``skillduet train env=<name>`` then applies it to every key
that neither the config file nor an override sets (``runs.config.load_run_config``).
"""

from __future__ import annotations

from typing import Any, Mapping

from skillduet_plugin.envs.registry import load_environments

# ``env=webshop``: pages are long (a results page is ~1,000 tokens): fewer turns, a longer context, one shopper
# episode per goal over many goals. Its episodes are long, so cloning needs its steps: measured on 32 goals, 60
# steps left the cross-entropy at 1.65 and the clone won no sampled episode, 200 steps reached 0.14; 1,000 steps on
# 512 goals make a clone that wins test goals it never saw (docs/study.md), 600 on 128 did not. RL practises 8
# goals, each 5 times with 8 rollouts (as the ALFWorld demo practises its 15 games): 9 steps over 256 goals (each
# seen once, 4 rollouts) left every measurement where it was.
WEBSHOP_RUN_DEFAULTS: dict[str, Any] = {
    "eval_tasks": 16, "train_tasks": 8, "max_turns": 8, "max_total_tokens": 4096,
    "warm_start.games": 512, "warm_start.episodes_per_game": 1, "warm_start.steps": 1000,
    "warm_start.max_turns": None, "num_generations": 8, "learning_rate": 3e-4,
    "steps": 10, "tasks_per_step": 4, "eval_training_tasks": 8, "save_steps": 3,
    "eval_samples": 8, "eval_panel_samples": 4,
    "skillduet.consolidation_interval": 3, "skillduet.skill_token_budget": 160,
    "skillduet.local_skill_token_budget": 96, "skillduet.max_heldout": 4}

#: Environment name -> its ``skillduet train`` defaults (dotted keys).
RUN_DEFAULTS: dict[str, dict[str, Any]] = {"webshop": WEBSHOP_RUN_DEFAULTS}

#: Environment name -> the task types that ``task_types=auto`` trains and evaluates on with a tiny model (all of
#: them where none is named). ALFWorld's pick2 (two objects to find) rarely fits in the demo's 8 turns.
TINY_TASK_TYPES: dict[str, str] = {"alfworld": "pick,look,clean,heat,cool"}


def register_run_defaults(env: str, defaults: Mapping[str, Any] | None = None, *,
                          tiny_task_types: str | None = None) -> None:
    """Register ``skillduet train``'s defaults (dotted keys) and/or the tiny model's task types of ``env``."""
    if defaults is not None:
        RUN_DEFAULTS[env] = dict(defaults)
    if tiny_task_types is not None:
        TINY_TASK_TYPES[env] = tiny_task_types


def run_defaults(env: str) -> dict[str, Any]:
    """The registered ``skillduet train`` defaults of ``env`` ({} when it has none)."""
    load_environments()  # an installed environment's module registers its presets when loaded
    return dict(RUN_DEFAULTS.get(env, {}))


__all__ = ["RUN_DEFAULTS", "TINY_TASK_TYPES", "WEBSHOP_RUN_DEFAULTS", "register_run_defaults", "run_defaults"]
