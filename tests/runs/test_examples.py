"""Every example config validates (a dry run of ``skillduet train --print-config``), and the readable TRL script
runs one step end to end."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest
import yaml

from skillduet_plugin.runs.config import RunConfig, load_run_config

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CONFIGS = sorted(EXAMPLES.glob("*.yaml"))


def test_the_expected_examples_exist():
    assert {p.name for p in CONFIGS} >= {"cpu_demo.yaml", "cpu_webshop.yaml", "cpu_smollm2.yaml",
                                         "qwen3_4b_alfworld.yaml", "grpo_baseline.yaml"}
    assert (EXAMPLES / "minimal_trl.py").is_file()


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_example_config_validates(path):
    cfg = load_run_config(path, check_machine=False)  # the model folders of real-model examples are not here
    assert cfg.name and cfg.method_config()
    assert path.read_text().startswith("#")  # every example says what it is for and how to run it


def test_cpu_demo_yaml_is_the_default_run():
    demo = load_run_config(EXAMPLES / "cpu_demo.yaml").resolved_dict()
    default = RunConfig().resolved_dict()
    assert demo == default


def test_grpo_baseline_matches_the_demo_except_the_method():
    demo = load_run_config(EXAMPLES / "cpu_demo.yaml").resolved_dict()
    base = load_run_config(EXAMPLES / "grpo_baseline.yaml").resolved_dict()
    differing = {k for k in demo if demo[k] != base[k]}
    assert differing == {"name", "skillduet"}
    assert load_run_config(EXAMPLES / "grpo_baseline.yaml").method_config().is_plain_grpo


def test_grpo_baseline_starts_from_the_demo_warm_start():
    from skillduet_plugin.runs.trl_runner import warm_start_settings

    demo = warm_start_settings(load_run_config(EXAMPLES / "cpu_demo.yaml"))
    assert warm_start_settings(load_run_config(EXAMPLES / "grpo_baseline.yaml")) == demo
    # method-only settings never reach the warm start; its own settings do (the negative control)
    assert warm_start_settings(load_run_config(None, ["skillduet.skill_token_budget=512"])) == demo
    assert warm_start_settings(load_run_config(None, ["warm_start.skill_token_budget=512"])) != demo
    assert warm_start_settings(load_run_config(None, ["warm_start.steps=701"])) != demo


def test_gpu_example_uses_a_served_analyzer():
    cfg = load_run_config(EXAMPLES / "qwen3_4b_alfworld.yaml", check_machine=False)
    method = cfg.method_config()
    assert method.analyzer.kind == "openai" and method.consolidation_interval == 10 and method.keep_ratio == 0.5
    assert not cfg.warm_start_enabled and cfg.eval_tasks == 0
    assert yaml.safe_load((EXAMPLES / "qwen3_4b_alfworld.yaml").read_text())["skillduet"]["analyzer"]["base_url"] \
        .startswith("http://127.0.0.1")


@pytest.mark.slow
def test_minimal_trl_script_runs(tmp_path, monkeypatch, capsys):
    pytest.importorskip("trl")
    pytest.importorskip("alfworld")
    from skillduet_plugin.envs.alfworld.generator import generate_games

    generate_games(tmp_path / "games", "train", n_per_type=1, seed=3, task_types=("pick", "look"),
                   max_walkthrough=6)
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path / "games"))
    monkeypatch.setattr(sys, "argv", ["minimal_trl.py", "--output-dir", str(tmp_path / "out"), "--steps", "2",
                                      "--tasks-per-step", "1", "--num-generations", "2", "--max-turns", "2",
                                      "--max-new-tokens-per-turn", "8", "--consolidation-interval", "1"])
    runpy.run_path(str(EXAMPLES / "minimal_trl.py"), run_name="__main__")
    assert "--- Global for" in capsys.readouterr().out
    assert (tmp_path / "out" / "skill_bank.sqlite").is_file()


def test_env_webshop_alone_is_the_webshop_demo(tmp_path):
    """``skillduet train env=webshop`` gets the WebShop demo settings (long pages, deterministic shopper), the
    same as examples/cpu_webshop.yaml apart from its name; anything set explicitly still wins."""
    example = load_run_config(EXAMPLES / "cpu_webshop.yaml").resolved_dict()
    plain = load_run_config(None, ["env=webshop"]).resolved_dict()
    assert {k for k in example if example[k] != plain[k]} == {"name"}
    assert plain["max_total_tokens"] == 4096 and plain["warm_start"]["episodes_per_game"] == 1
    mine = load_run_config(None, ["env=webshop", "max_turns=5", "warm_start.steps=7"])
    assert mine.max_turns == 5 and mine.warm_start.steps == 7 and mine.warm_start.games == 512
    file = tmp_path / "ws.yaml"
    file.write_text("env: webshop\nmax_total_tokens: 3000\nwarm_start:\n  batch_size: 2\n")
    from_file = load_run_config(file)
    assert from_file.max_total_tokens == 3000 and from_file.warm_start.batch_size == 2
    assert from_file.warm_start.games == 512 and from_file.eval_tasks == 16
    # ALFWorld keeps the demo defaults
    assert load_run_config(None, ["env=alfworld"]).resolved_dict() == RunConfig().resolved_dict()
