"""Settings declared once: the episode settings (core.episode) in the run, TRL and verl configs, the method presets
in preset() / skillduet train / skillduet study, the scope kinds, and the one "module:attr" resolver."""

from __future__ import annotations

import dataclasses

import pytest

from skillduet_plugin import config as method_config
from skillduet_plugin.core.episode import EpisodeSettings, episode_checks, episode_field, episode_settings
from skillduet_plugin.core.names import SCOPE_KEYS, SINGLE_SCOPE, scope_key
from skillduet_plugin.core.registry import resolve_target
from skillduet_plugin.core.settings import ConfigError, SettingRenamed

EPISODE = {f.name: f for f in dataclasses.fields(EpisodeSettings)}


def _fields(cls) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls)}


def test_run_config_takes_the_episode_declarations_with_the_demo_values():
    from skillduet_plugin.runs.config import RunConfig

    run = _fields(RunConfig)
    for name, base in EPISODE.items():
        assert run[name].metadata["help"].startswith(base.metadata["help"]), name
    # The demo's values are the run config's defaults (its numbers must not change); the rest are the method's.
    demo = RunConfig()
    assert (demo.max_turns, demo.max_new_tokens_per_turn, demo.max_total_tokens) == (8, 32, 2560)
    assert demo.invalid_action_penalty == EPISODE["invalid_action_penalty"].default
    assert demo.teacher_at == EPISODE["teacher_at"].default
    with pytest.raises(ConfigError, match=r"^max_turns=0 is invalid"):
        RunConfig(max_turns=0)
    with pytest.raises(ConfigError, match=r"^teacher_at='later' is invalid: allowed values are generation, loss"):
        RunConfig(teacher_at="later")


def test_trl_config_has_the_method_defaults_and_checks():
    pytest.importorskip("trl")
    from skillduet_plugin.integrations.trl.config import SkillDuetGRPOConfig

    trl = _fields(SkillDuetGRPOConfig)
    for name, base in EPISODE.items():
        assert trl[name].default == base.default, name
        assert trl[name].metadata["help"].startswith(base.metadata["help"]), name
        assert "check" not in trl[name].metadata  # HfArgumentParser would pass it to argparse
    common = dict(output_dir="/tmp/unused", bf16=False, use_cpu=True, report_to="none")
    with pytest.raises(ConfigError, match=r"^max_new_tokens_per_turn=0 is invalid"):
        SkillDuetGRPOConfig(max_new_tokens_per_turn=0, **common)
    with pytest.raises(ConfigError, match=r"^action_selection='auto' is invalid"):  # auto is the run config's
        SkillDuetGRPOConfig(action_selection="auto", **common)


def test_verl_env_settings_share_names_and_defaults():
    pytest.importorskip("verl")
    from skillduet_plugin.integrations.verl.settings import EnvSettings, parse_settings

    env = EnvSettings()
    for name in ("max_turns", "max_new_tokens_per_turn", "invalid_action_penalty"):
        assert getattr(env, name) == EPISODE[name].default
    assert parse_settings({"env": {"max_new_tokens_per_turn": 24}}).env.max_new_tokens_per_turn == 24
    # the old spelling works for one release, with a one-line warning naming the new key
    with pytest.warns(SettingRenamed) as caught:
        assert parse_settings({"env": {"max_turn_tokens": 24}}).env.max_new_tokens_per_turn == 24
    (message,) = [str(w.message) for w in caught]
    assert message == ("skillduet.env.max_turn_tokens is deprecated and stops working in skillduet 0.2: write "
                       "skillduet.env.max_new_tokens_per_turn")
    with pytest.raises(ConfigError, match=r"^skillduet.env.max_turn_tokens=24 is invalid: it is the old name of "):
        parse_settings({"env": {"max_turn_tokens": 24, "max_new_tokens_per_turn": 32}})


def test_episode_field_widens_and_episode_settings_reads_any_config():
    @dataclasses.dataclass
    class Mine:
        max_turns: int = episode_field("max_turns", 3, help="mine")
        action_selection: str = episode_field("action_selection", choices=("generate", "choose", "auto"))

    mine = _fields(Mine)
    assert mine["max_turns"].default == 3 and mine["max_turns"].metadata["help"].endswith("; mine")
    assert mine["action_selection"].metadata["check"]["choices"][-1] == "auto"
    assert episode_checks(["max_turns"]) == {"max_turns": {"kind": "int", "lo": 1}}
    settings = episode_settings(Mine(), action_selection="choose")
    assert (settings.max_turns, settings.action_selection) == (3, "choose")
    assert settings.max_new_tokens_per_turn == EPISODE["max_new_tokens_per_turn"].default


def test_presets_once(monkeypatch):
    from skillduet_plugin import study
    from skillduet_plugin.runs.config import RunConfig

    for name, (label, overlay) in study.arms().items():
        method = overlay["method"]
        assert method in method_config.METHOD_PRESETS
        assert {k: v for k, v in overlay.items() if k != "method"}.items() >= \
            method_config.METHOD_PRESETS[method].settings.items() - {("selector", "strength")}
    assert study.arms()["grpo"][0] == method_config.METHOD_PRESETS["grpo"].label
    # A preset added to the one table is a valid skillduet.method at once (negative control: unknown before).
    with pytest.raises(ConfigError, match="skillduet.method='mine'"):
        RunConfig(skillduet={"method": "mine"})
    monkeypatch.setitem(method_config.METHOD_PRESETS, "mine",
                        method_config.MethodPreset("Mine", {"keep_ratio": 0.25}))
    assert RunConfig(skillduet={"method": "mine"}).method_config().keep_ratio == 0.25
    assert method_config.preset("mine").keep_ratio == 0.25


def test_scope_kinds_once():
    assert method_config.SCOPE_KINDS == tuple(SCOPE_KEYS)
    from skillduet_plugin.skills.lifecycle import resolve_scope

    assert resolve_scope is scope_key
    assert scope_key("single", task_type="clean", task_id="g1") == SINGLE_SCOPE
    with pytest.raises(ValueError, match="allowed values are task_type, task, single"):
        scope_key("room", task_type="clean", task_id="g1")


def test_one_resolver():
    assert resolve_target("os.path:join") is __import__("os").path.join
    assert resolve_target("collections:OrderedDict.fromkeys") == __import__("collections").OrderedDict.fromkeys
    with pytest.raises(ConfigError, match=r"^skillduet.env.factory='nocolon' is invalid: expected"):
        resolve_target("nocolon", "skillduet.env.factory")
