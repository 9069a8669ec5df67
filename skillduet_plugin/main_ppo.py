"""``python -m skillduet_plugin.main_ppo``: verl's PPO entry point with the SkillDuet config.

The config is verl's ``ppo_trainer`` plus ``trainer.plugins`` and a ``skillduet:`` section, so an existing verl
command line runs unchanged (stock verl) and ``trainer.plugins=[skillduet]`` is the one override that turns
SkillDuet on. ``DRY_RUN=1`` prints the composed, validated config and exits without starting Ray.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Sequence

import hydra
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from omegaconf import OmegaConf, open_dict

from skillduet_plugin.config import ConfigError
from skillduet_plugin.integrations.verl import AGENT_LOOP_NAME, PLUGIN_NAME, TRAINER_NAME
from skillduet_plugin.integrations.verl.plugin import ensure_registered
from skillduet_plugin.integrations.verl.settings import parse_settings

CONFIG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "verl_config")
STOCK_TRAINER_MODE = "sync"
STOCK_AGENT_LOOP = "single_turn_agent"


def plugin_enabled(config: Any) -> bool:
    plugins = config.trainer.get("plugins", None) or []
    if isinstance(plugins, str):
        plugins = [plugins]
    return PLUGIN_NAME in list(plugins)


def apply_plugins(config: Any) -> bool:
    """Switch a composed config to SkillDuet when ``trainer.plugins`` lists it; returns whether it did.

    Selects the ``skillduet_sync`` trainer and the ``skillduet_agent`` loop where the config still has verl's
    defaults, and validates the ``skillduet:`` section (a bad value fails here, before Ray starts).
    """
    if not plugin_enabled(config):
        return False

    if not config.trainer.get("use_v1", True):
        raise ConfigError("trainer.use_v1=false is invalid with trainer.plugins=[skillduet]: SkillDuet runs on "
                          "verl's V1 trainer; remove the override")
    with open_dict(config):
        mode = config.trainer.v1.trainer_mode
        if mode == STOCK_TRAINER_MODE:
            config.trainer.v1.trainer_mode = TRAINER_NAME
        elif mode != TRAINER_NAME:
            raise ConfigError(f"trainer.v1.trainer_mode={mode!r} is invalid with trainer.plugins=[skillduet]: "
                              f"SkillDuet needs the synchronous trainer ({TRAINER_NAME}); drop the override")
        agent = config.actor_rollout_ref.rollout.agent
        if agent.default_agent_loop == STOCK_AGENT_LOOP:
            agent.default_agent_loop = AGENT_LOOP_NAME
        if config.get("skillduet", None) is None:
            config.skillduet = {}
    parse_settings(config.skillduet)
    return True


def run(config: Any) -> None:
    """Compose-time checks, then verl's V1 PPO run (``verl.trainer.main_ppo.run_ppo``)."""
    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo  # lazy: imports torch
    from verl.trainer.ppo.utils import need_critic, need_reference_policy  # lazy: imports torch
    from verl.utils.config import validate_config  # lazy: imports torch
    from verl.utils.device import auto_set_device  # lazy: imports torch

    enabled = apply_plugins(config)
    auto_set_device(config)
    validate_config(config=config, use_reference_policy=need_reference_policy(config),
                    use_critic=need_critic(config))
    if os.environ.get("DRY_RUN", "") not in ("", "0"):
        print(OmegaConf.to_yaml(config, resolve=True))
        print(f"# DRY_RUN: composed config printed; skillduet plugin {'ON' if enabled else 'off'}; not training.")
        return
    if enabled:

        ensure_registered()  # a broken installation stops here, before Ray starts
    if config.trainer.use_v1:
        run_ppo(config, task_runner_class=TaskRunnerV1)
    else:
        from verl.trainer.main_ppo import main as verl_main  # lazy: imports torch

        verl_main.__wrapped__(config)  # verl's own legacy (V0) path, unchanged


@hydra.main(config_path="verl_config", config_name="skillduet_trainer", version_base=None)
def main(config: Any) -> None:
    run(config)


def compose(overrides: Sequence[str] = ()) -> Any:
    """The composed config for ``overrides`` (as on the command line), with the plugin switch applied."""

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        config = hydra_compose(config_name="skillduet_trainer", overrides=list(overrides))
    apply_plugins(config)
    return config


if __name__ == "__main__":
    sys.exit(main())
