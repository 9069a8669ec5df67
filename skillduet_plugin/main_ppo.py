"""``python -m skillduet_plugin.main_ppo``: verl's PPO entry point with the ``skillduet:`` section in its config.

Stock ``python -m verl.trainer.main_ppo ... +trainer.plugins=[skillduet] +skillduet.opd_coef=0.2`` runs SkillDuet
too (the ``verl.plugins`` entry point switches it on; ``integrations.verl.plugin``). This module only adds
convenience: its config is verl's ``ppo_trainer`` plus ``trainer.plugins: []`` and the ``skillduet:`` section of
the defaults (generated from the settings classes, :func:`~skillduet_plugin.integrations.verl.settings.hydra_node`),
so the keys take no ``+`` (``trainer.plugins=[skillduet] skillduet.opd_coef=0.2``), and ``DRY_RUN=1`` prints the
composed, validated config and exits without starting Ray.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Sequence

import hydra
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from skillduet_plugin.integrations.verl.plugin import install
from skillduet_plugin.integrations.verl.settings import apply_plugins, hydra_node, plugin_enabled

CONFIG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "verl_config")
#: the config that ``verl_config/skillduet_trainer.yaml`` lists after ``ppo_trainer``
DEFAULTS_NODE = "skillduet_defaults"

ConfigStore.instance().store(name=DEFAULTS_NODE, node={"skillduet": hydra_node()})
install()  # idempotent; here also when verl's own plugin discovery is off (VERL_USE_EXTERNAL_PLUGINS=none)


def run(config: Any) -> None:
    """verl's checks (SkillDuet's included: the plugin wraps ``validate_config``), then verl's PPO run."""
    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo  # lazy: verl (imports torch)
    from verl.trainer.ppo.utils import need_critic, need_reference_policy  # lazy: verl (imports torch)
    from verl.utils.config import validate_config  # lazy: verl (imports torch)
    from verl.utils.device import auto_set_device  # lazy: verl (imports torch)

    auto_set_device(config)
    validate_config(config=config, use_reference_policy=need_reference_policy(config),
                    use_critic=need_critic(config))
    if os.environ.get("DRY_RUN", "") not in ("", "0"):
        print(OmegaConf.to_yaml(config, resolve=True))
        print(f"# DRY_RUN: composed config printed; skillduet plugin {'ON' if plugin_enabled(config) else 'off'}; "
              "not training.")
        return
    if config.trainer.use_v1:
        run_ppo(config, task_runner_class=TaskRunnerV1)
    else:
        from verl.trainer.main_ppo import main as verl_main  # lazy: verl (imports torch)

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
