"""``skillduet_plugin.main_ppo`` composes verl's config; ``trainer.plugins=[skillduet]`` is the only switch;
every recipe's dry run composes, validates and prints its config."""

from __future__ import annotations

import glob
import os
import subprocess

import pytest

pytest.importorskip("verl")

from skillduet_plugin.config import ConfigError  # noqa: E402
from skillduet_plugin.integrations.verl.settings import parse_settings  # noqa: E402
from skillduet_plugin.main_ppo import compose  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECIPES = sorted(glob.glob(os.path.join(REPO, "recipes", "*.sh")))
RECIPES = [r for r in RECIPES if os.path.basename(r) != "common.sh" and not os.path.basename(r).startswith("cpu_")]


def test_without_the_plugin_the_config_is_stock_verl():
    cfg = compose(["algorithm.adv_estimator=rloo", "trainer.total_epochs=3"])
    assert cfg.trainer.v1.trainer_mode == "sync"
    assert cfg.actor_rollout_ref.rollout.agent.default_agent_loop == "single_turn_agent"
    assert cfg.algorithm.adv_estimator == "rloo" and cfg.trainer.total_epochs == 3
    assert list(cfg.trainer.plugins) == []


def test_plugin_override_switches_trainer_and_agent_loop():
    cfg = compose(["trainer.plugins=[skillduet]", "skillduet.selector=random", "skillduet.keep_ratio=0.25",
                   "skillduet.env.name=webshop", "data.train_batch_size=32"])
    assert cfg.trainer.v1.trainer_mode == "skillduet_sync"
    assert cfg.actor_rollout_ref.rollout.agent.default_agent_loop == "skillduet_agent"
    assert cfg.data.train_batch_size == 32  # stock overrides still apply
    settings = parse_settings(cfg.skillduet)
    assert settings.method.selector == "random" and settings.method.keep_ratio == 0.25
    assert settings.env.name == "webshop" and settings.method.consolidation_interval == 10


def test_vllm_rollout_keeps_prefix_caching_on():
    """Rollouts of a group share their whole first prompt (the Global with it), and a teacher prompt is the student
    prompt up to the Global plus the Local skill: vLLM's automatic prefix caching serves both. verl turns it on
    (rollout.enable_prefix_caching) and the CPU settings of the vLLM runs must not turn it off."""
    from skillduet_testing.verl_vllm import VLLM_CPU_OVERRIDES

    cfg = compose(["trainer.plugins=[skillduet]", *VLLM_CPU_OVERRIDES])
    assert cfg.actor_rollout_ref.rollout.enable_prefix_caching is True


def test_bad_settings_fail_at_compose_time():
    with pytest.raises(ConfigError, match="selector"):
        compose(["trainer.plugins=[skillduet]", "skillduet.selector=best"])
    with pytest.raises(ConfigError, match="trainer_mode"):
        compose(["trainer.plugins=[skillduet]", "trainer.v1.trainer_mode=colocate_async"])
    with pytest.raises(ConfigError, match="use_v1"):
        compose(["trainer.plugins=[skillduet]", "trainer.use_v1=false"])
    with pytest.raises(ConfigError, match="skillduet.env.max_turns"):
        parse_settings({"env": {"max_turns": 0}})


def test_verl_errors_name_the_full_key_and_refuse_what_verl_ignores():
    with pytest.raises(ConfigError, match=r"^skillduet.keep_ratio=2 is invalid: expected a number in \(0, 1\]$"):
        parse_settings({"keep_ratio": 2})
    with pytest.raises(ConfigError, match=r"^unknown setting\(s\) skillduet.bogus: allowed keys of skillduet are "):
        parse_settings({"bogus": 1})
    with pytest.raises(ConfigError, match=r"^unknown setting\(s\) skillduet.env.turns: allowed keys of skillduet.env"):
        parse_settings({"env": {"turns": 3}})
    # verl aggregated OPD like the PPO loss whatever opd_agg said; now it says so
    with pytest.raises(ConfigError, match="skillduet.opd_agg='seq-mean-token-sum' is invalid: .*loss_agg_mode"):
        parse_settings({"opd_agg": "seq-mean-token-sum"})


def test_plain_verl_override_route_parses():
    """`python -m verl.trainer.main_ppo ... +skillduet.*`: a partial section means paper defaults elsewhere."""
    settings = parse_settings({"opd_coef": 0.2, "env": {"name": "webshop", "max_turns": 15}})
    assert settings.method.opd_coef == 0.2 and settings.method.gate_beta == 5.0
    assert settings.env.max_turns == 15
    assert settings.resolved_bank_path("/ck").endswith("/ck/skillduet/bank.sqlite")


@pytest.mark.slow  # one verl start-up per recipe (~10-40 s on a busy CI machine)
@pytest.mark.parametrize("recipe", RECIPES, ids=[os.path.basename(r) for r in RECIPES])
def test_recipe_dry_run(recipe):
    env = dict(os.environ, DRY_RUN="1", PYTHONPATH=REPO, HOME=os.environ.get("HOME", "/tmp"))
    proc = subprocess.run(["bash", recipe], capture_output=True, text=True, env=env, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "trainer_mode: skillduet_sync" in out and "default_agent_loop: skillduet_agent" in out
    assert "# DRY_RUN" in out and "Qwen/Qwen3-4B" in out
    name = os.path.basename(recipe)
    if name.startswith("grpo"):
        assert "opd_coef: 0.0" in out and "extract_local: false" in out
    elif name.startswith("local_opd"):
        assert "use_global: false" in out and "extract_local: true" in out
    elif "random" in name:
        assert "selector: random" in out
    elif "keep_ratio" in name:
        assert "keep_ratio: 0.25" in out
    else:
        assert "selector: strength" in out and "keep_ratio: 0.5" in out and "opd_coef: 0.1" in out


@pytest.mark.slow  # builds the tiny model and generated games, then one verl config composition
def test_cpu_tiny_recipe_dry_run(tmp_path):
    """The laptop recipe composes a plugin run on the CPU rollout backend (the real run: tests/verl/test_real_fit)."""
    env = dict(os.environ, DRY_RUN="1", PYTHONPATH=REPO, OUT=str(tmp_path / "run"))
    proc = subprocess.run(["bash", os.path.join(REPO, "recipes", "cpu_tiny_alfworld.sh")], capture_output=True,
                          text=True, env=env, timeout=600, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "trainer_mode: skillduet_sync" in out and "default_agent_loop: skillduet_agent" in out
    assert "# DRY_RUN" in out and "name: hf" in out and "consolidation_interval: 1" in out
    assert "exit code 0" in out
