"""The ``skillduet:`` section of a verl config is generated from the settings classes (no copy to drift from), a
stock verl config takes it with ``+``, a key that nothing reads stops the run, and an old name still works."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

pytest.importorskip("verl")

from skillduet_plugin.core.settings import ConfigError, SettingRenamed  # noqa: E402
from skillduet_plugin.integrations.verl.settings import (apply_plugins, default_section, hydra_node,  # noqa: E402
                                                         parse_settings)
from skillduet_plugin.main_ppo import CONFIG_DIR, compose  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _stock(overrides: list[str]):
    """verl's own ppo_trainer config, composed as ``python -m verl.trainer.main_ppo`` composes it."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module

    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=overrides)


def test_the_yaml_holds_no_copy_of_the_section():
    with open(os.path.join(CONFIG_DIR, "skillduet_trainer.yaml")) as fh:
        data = yaml.safe_load(fh)
    assert "skillduet" not in data and "skillduet_defaults" in data["defaults"]


def test_the_composed_section_is_the_dataclass_defaults():
    from omegaconf import OmegaConf

    stock = compose([])  # plugin off: the section is exactly the node generated from the dataclasses
    assert OmegaConf.to_container(stock.skillduet) == hydra_node()
    on = compose(["trainer.plugins=[skillduet]", "skillduet.opd_coef=0.2", "skillduet.env.max_turns=7"])
    section = OmegaConf.to_container(on.skillduet)
    expected = default_section()
    expected["opd_coef"], expected["env"]["max_turns"] = 0.2, 7
    assert section == expected
    assert parse_settings(section).to_section() == section


def test_a_section_that_differs_from_the_declarations_is_seen():
    """Negative control of the test above: a value other than the declared default shows in the comparison."""
    from omegaconf import OmegaConf

    section = compose(["trainer.plugins=[skillduet]", "skillduet.gate_beta=4.0"]).skillduet
    assert OmegaConf.to_container(section) != default_section()


def test_stock_verl_config_takes_the_section_with_plus():
    config = _stock(["+trainer.plugins=[skillduet]", "+skillduet.opd_coef=0.2", "+skillduet.env.name=webshop"])
    assert apply_plugins(config) is True
    assert config.trainer.v1.trainer_mode == "skillduet_sync"
    assert config.actor_rollout_ref.rollout.agent.default_agent_loop == "skillduet_agent"
    assert config.skillduet.opd_coef == 0.2 and config.skillduet.gate_beta == default_section()["gate_beta"]
    assert config.skillduet.env.name == "webshop" and config.skillduet.analyzer.kind == "offline"


def test_a_key_nothing_reads_is_an_error():
    with pytest.raises(ConfigError, match=r"^skillduet.opd_coef, skillduet.env.max_turns set, but trainer.plugins "
                                          r"does not list skillduet, so nothing would read it: add "):
        apply_plugins(_stock(["+skillduet.opd_coef=0.2", "+skillduet.env.max_turns=3"]))
    with pytest.raises(ConfigError, match=r"^skillduet.keep_ratio set, but trainer.plugins does not list"):
        compose(["skillduet.keep_ratio=0.25"])
    assert apply_plugins(_stock([])) is False  # stock verl without any skillduet key: untouched
    assert apply_plugins(compose([])) is False  # the defaults' section without the plugin: nothing set
    with pytest.raises(ConfigError, match=r"^unknown setting\(s\) skillduet.opd_cof: allowed keys of skillduet"):
        apply_plugins(_stock(["+trainer.plugins=[skillduet]", "+skillduet.opd_cof=0.2"]))


def test_an_unregistered_environment_is_refused_before_the_run():
    """An environment no installed package registers stops the section's parse (one line, before Ray starts) rather
    than the agent-loop workers; with ``factory`` the name need not be registered."""
    with pytest.raises(ConfigError, match=r"^skillduet.env.name='lanterns' is invalid: allowed values are .*alfworld"):
        apply_plugins(_stock(["+trainer.plugins=[skillduet]", "+skillduet.env.name=lanterns"]))
    made = parse_settings({"env": {"name": "lanterns", "factory": "lanterns_env:make_lanterns"}})
    assert made.env.name == "lanterns"


def test_the_old_name_works_for_one_release_with_a_one_line_warning():
    with pytest.warns(SettingRenamed, match=r"^skillduet.env.max_turn_tokens is deprecated and stops working in "
                                            r"skillduet 0.2: write skillduet.env.max_new_tokens_per_turn$"):
        config = compose(["trainer.plugins=[skillduet]", "skillduet.env.max_turn_tokens=24"])  # no '+' needed
    assert config.skillduet.env.max_new_tokens_per_turn == 24 and "max_turn_tokens" not in config.skillduet.env
    with pytest.warns(SettingRenamed):
        config = _stock(["+trainer.plugins=[skillduet]", "+skillduet.env.max_turn_tokens=24"])
        apply_plugins(config)
    assert config.skillduet.env.max_new_tokens_per_turn == 24


@pytest.mark.slow  # one verl start-up (~10-20 s); stops before Ray
def test_stock_entry_stops_on_an_unread_key_with_one_line():
    env = dict(os.environ, PYTHONPATH=REPO, VERL_USE_EXTERNAL_PLUGINS="auto")
    proc = subprocess.run([sys.executable, "-m", "verl.trainer.main_ppo", "+skillduet.opd_coef=0.2",
                           "hydra.output_subdir=null", "hydra.run.dir=.", "hydra/job_logging=none",
                           "hydra/hydra_logging=none"], capture_output=True, text=True, env=env, timeout=600,
                          cwd=REPO)
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("skillduet:")]
    assert lines == ["skillduet: skillduet.opd_coef set, but trainer.plugins does not list skillduet, so nothing "
                     "would read it: add +trainer.plugins=[skillduet] (or drop the skillduet settings)"]
    assert "Traceback" not in proc.stderr and "ray init" not in proc.stdout
