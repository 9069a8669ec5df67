"""Run config: defaults are the CPU demo, YAML + dotted overrides, presets, and error messages naming fields."""

from __future__ import annotations

import pytest
import yaml

from skillduet_plugin.config import ConfigError
from skillduet_plugin.runs.config import RunConfig, load_run_config, parse_overrides
from skillduet_plugin.runs.overrides import parse_value
from skillduet_plugin.runs.env_defaults import run_defaults
from skillduet_plugin.runs.environment import env_kwargs


def test_defaults_are_the_demo_with_the_papers_schedule():
    cfg = load_run_config()
    assert cfg.model == "tiny"
    assert cfg.env == "alfworld" and cfg.data_dir is None
    method = cfg.method_config()
    assert method.analyzer.kind == "offline" and method.synthesizer.kind == "offline"
    # the paper's consolidation every 10 steps, and the demo runs long enough to write a Global
    assert method.consolidation_interval == 10 and cfg.steps // method.consolidation_interval >= 1
    assert cfg.task_type_list == ["pick", "look", "clean", "heat", "cool"]
    assert cfg.panel == "valid_unseen"
    assert cfg.warm_start_enabled  # tiny model -> warm start on by default


def test_parse_value_reads_yaml_scalars():
    assert parse_value("3") == 3
    assert parse_value("0.25") == 0.25
    assert parse_value("true") is True
    assert parse_value("null") is None
    assert parse_value("[a, b]") == ["a", "b"]
    assert parse_value("webshop") == "webshop"
    assert parse_value("") == ""


def test_parse_overrides_dotted_keys():
    assert parse_overrides(["skillduet.keep_ratio=0.25", "env=webshop", "steps=12"]) == [
        (["skillduet", "keep_ratio"], 0.25), (["env"], "webshop"), (["steps"], 12)]
    assert parse_overrides(["skillduet.analyzer.base_url=http://h:1/v1"]) == [
        (["skillduet", "analyzer", "base_url"], "http://h:1/v1")]


@pytest.mark.parametrize("item", ["steps", "=3", "a..b=1", "skillduet.=1"])
def test_parse_overrides_rejects_malformed(item):
    with pytest.raises(ConfigError, match="override"):
        parse_overrides([item])


def test_overrides_merge_into_sections():
    cfg = load_run_config(None, ["skillduet.keep_ratio=0.25", "env=webshop", "steps=12",
                                 "warm_start.steps=7", "skillduet.analyzer.temperature=0.0"])
    assert cfg.env == "webshop" and cfg.steps == 12 and cfg.panel == "test"
    assert cfg.warm_start.steps == 7 and cfg.warm_start.skill_fraction == RunConfig().warm_start.skill_fraction
    assert cfg.warm_start.games == run_defaults("webshop")["warm_start.games"]  # env=webshop: its demo
    method = cfg.method_config()
    assert method.keep_ratio == 0.25
    assert method.analyzer.temperature == 0.0
    # the WebShop demo's shortened consolidation schedule is kept under an override
    assert method.consolidation_interval == run_defaults("webshop")["skillduet.consolidation_interval"]
    assert load_run_config(None, ["skillduet.keep_ratio=0.25"]).method_config().consolidation_interval == 10


def test_yaml_file_then_overrides(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"name": "x", "steps": 5, "skillduet": {"method": "grpo"},
                                    "trl": {"max_grad_norm": 0.5}}))
    cfg = load_run_config(path, ["steps=6"], output_dir=str(tmp_path / "out"))
    assert (cfg.name, cfg.steps, cfg.output_dir) == ("x", 6, str(tmp_path / "out"))
    assert cfg.trl == {"max_grad_norm": 0.5}
    method = cfg.method_config()
    assert method.is_plain_grpo
    # a file's skillduet section starts from the paper defaults, not the demo's schedule
    assert method.consolidation_interval == 10


@pytest.mark.parametrize("method,check", [
    ("local_only", lambda m: not m.use_global and m.opd_coef > 0),
    ("random", lambda m: m.selector == "random"),
    ("grpo", lambda m: m.is_plain_grpo),
    ("skillduet", lambda m: m.selector == "strength" and m.use_global),
])
def test_method_presets(method, check):
    assert check(load_run_config(None, [f"skillduet.method={method}"]).method_config())


@pytest.mark.parametrize("override,field", [
    ("steps=0", "steps"),
    ("num_generations=1", "num_generations"),
    ("env=atari", "env"),
    ("model=tiny:huge", "model"),
    ("learning_rate=-1", "learning_rate"),
    ("teacher_at=later", "teacher_at"),
    ("warm_start.games=0", "warm_start.games"),
    ("warm_start.skill_fraction=2", "warm_start.skill_fraction"),
    ("warm_start.enabled=maybe", "warm_start.enabled"),
    ("skillduet.keep_ratio=2", "skillduet.keep_ratio"),
    ("skillduet.method=ppo", "skillduet.method"),
    ("eval_before=yes please", "eval_before"),
])
def test_errors_name_the_field(override, field):
    with pytest.raises(ConfigError) as err:
        load_run_config(None, [override])
    assert str(err.value).startswith(f"{field}=")


def test_unknown_keys_are_listed():
    with pytest.raises(ConfigError, match="unknown setting\\(s\\) nope: allowed keys are .*steps"):
        load_run_config(None, ["nope=1"])
    with pytest.raises(ConfigError, match="^unknown setting\\(s\\) skillduet.bogus: allowed keys of skillduet are "):
        load_run_config(None, ["skillduet.bogus=1"])
    with pytest.raises(ConfigError, match="warm_start.bogus"):
        load_run_config(None, ["warm_start.bogus=1"])
    with pytest.raises(ConfigError, match="steps is not a section"):
        load_run_config(None, ["steps.x=1"])


def test_missing_or_bad_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_run_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_run_config(bad)


def test_resolved_dict_round_trips():
    cfg = load_run_config(None, ["skillduet.method=random", "steps=4"])
    data = cfg.resolved_dict()
    assert data["skillduet"]["method"] == "random" and data["skillduet"]["selector"] == "random"
    assert data["eval_panel"] == "valid_unseen"
    again = RunConfig.from_dict(yaml.safe_load(yaml.safe_dump(data)))
    assert again.method_config() == cfg.method_config()
    assert again.steps == 4


def test_real_model_path_disables_auto_warm_start():
    cfg = load_run_config(None, ["model=/some/folder"], check_machine=False)
    assert not cfg.is_tiny and not cfg.warm_start_enabled
    assert load_run_config(None, ["model=/some/folder", "warm_start.enabled=true"],
                           check_machine=False).warm_start_enabled


def test_action_selection_auto_chooses_for_tiny_models_only():
    cfg = load_run_config()
    assert cfg.action_selection == "auto" and cfg.action_mode == "choose"
    assert cfg.resolved_dict()["action_selection"] == "choose"
    assert load_run_config(None, ["model=/some/folder"], check_machine=False).action_mode == "generate"
    webshop = load_run_config(None, ["env=webshop"])
    assert webshop.action_mode == "choose"  # the search page then offers queries built from the instruction
    assert env_kwargs(webshop, "test")["search_choices"] == 8
    real = load_run_config(None, ["env=webshop", "model=/some/folder"], check_machine=False)
    assert real.action_mode == "generate" and "search_choices" not in env_kwargs(real, "test")
    mine = load_run_config(None, ["env=webshop", "env_kwargs={search_choices: 3}"])
    assert env_kwargs(mine, "test")["search_choices"] == 3  # the user's env_kwargs win
    assert load_run_config(None, ["action_selection=generate"]).action_mode == "generate"
    assert load_run_config(None, ["model=/some/folder", "action_selection=choose"],
                           check_machine=False).action_mode == "choose"
    with pytest.raises(ConfigError, match="action_selection='sample' is invalid: allowed values are auto, "
                                          "generate, choose"):
        load_run_config(None, ["action_selection=sample"])


def test_the_removed_wall_clock_cap_is_refused_with_its_replacement(tmp_path):
    # a wall-clock cap made the warm-started model depend on the machine's load; old configs must say so
    with pytest.raises(ConfigError, match=r"warm_start.max_minutes=5 was removed.*warm_start.steps is the budget"):
        load_run_config(None, ["warm_start.max_minutes=5"])
    old = tmp_path / "old.yaml"
    old.write_text("warm_start:\n  steps: 10\n  max_minutes: 5.0\n")
    with pytest.raises(ConfigError, match=r"max_minutes=5.0 was removed.*Delete the key"):
        load_run_config(old)
    assert not hasattr(load_run_config(None, ["warm_start.steps=10"]).warm_start, "max_minutes")


def test_task_types_are_checked_against_the_env_and_passed_to_it():
    from skillduet_plugin.runs.environment import env_kwargs

    assert env_kwargs(load_run_config(), "train")["task_types"] == ["pick", "look", "clean", "heat", "cool"]
    assert "task_types" not in env_kwargs(load_run_config(None, ["task_types=null"]), "train")
    assert load_run_config(None, ["env=webshop"]).task_type_list == []  # auto: WebShop has one scope, all of it
    assert load_run_config(None, ["model=tiny:small", "task_types=auto"]).task_type_list  # a tiny model: the demo's
    assert RunConfig(model="/m", task_types="auto").task_type_list == []  # a real model: all six
    with pytest.raises(ConfigError, match=r"task_types.*pick3 unknown: alfworld task types are pick, "):
        load_run_config(None, ["task_types=pick,pick3"])
    with pytest.raises(ConfigError, match=r"task_types.*env 'webshop' has no task types.*task_types=null"):
        load_run_config(None, ["env=webshop", "task_types=pick"])


def test_micro_batch_must_divide_the_step_batch_and_maps_to_gradient_accumulation(tmp_path):
    from skillduet_plugin.runs import trl_runner
    from skillduet_plugin.runs.rundir import RunDir

    with pytest.raises(ConfigError, match=r"micro_batch.*divisor of tasks_per_step x num_generations = 40: "
                                          r"1, 2, 4, 5, 8, 10, 20, 40"):
        load_run_config(overrides=["micro_batch=3"])
    run = RunDir(tmp_path)
    whole = trl_runner.grpo_args(load_run_config(overrides=["micro_batch=0"]), run)
    split = trl_runner.grpo_args(load_run_config(overrides=["micro_batch=8"]), run)
    assert (whole.per_device_train_batch_size, whole.gradient_accumulation_steps, whole.steps_per_generation) == \
        (40, 1, 1)
    # five slices of 8 accumulated into one optimizer step per generation batch of 5 tasks x 8 rollouts
    assert (split.per_device_train_batch_size, split.gradient_accumulation_steps, split.steps_per_generation) == \
        (8, 5, 5)
    assert split.generation_batch_size == whole.generation_batch_size == 40
