"""SkillDuetConfig validation: every bad value names the field, the value and what is allowed."""

from __future__ import annotations

import pytest

from skillduet_plugin.config import ConfigError, SkillDuetConfig, preset


def test_paper_defaults():
    cfg = SkillDuetConfig()
    assert (cfg.gate_beta, cfg.consolidation_interval, cfg.keep_ratio, cfg.selector) == (5.0, 10, 0.5, "strength")
    assert cfg.analyzer.kind == "offline"


@pytest.mark.parametrize("field,value,needle", [
    ("keep_ratio", 1.5, "keep_ratio=1.5 is invalid: expected a number in (0, 1]"),
    ("keep_ratio", 0, "keep_ratio=0 is invalid: expected a number in (0, 1]"),
    ("selector", "best", "selector='best' is invalid: allowed values are contrast, random, strength, utility"),
    ("consolidation_interval", 0, "consolidation_interval=0 is invalid: expected an integer >= 1"),
    ("consolidation_interval", 2.5, "consolidation_interval=2.5 is invalid: expected an integer >= 1"),
    ("opd_coef", -0.1, "opd_coef=-0.1 is invalid: expected a number >= 0"),
    ("gate_beta", "5", "gate_beta='5' is invalid: expected a number >= 0"),
    ("heldout", "all", "heldout='all' is invalid: allowed values are teacher, same_scope"),
    ("opd_agg", "sum", "opd_agg='sum' is invalid"),
    ("use_global", "yes", "use_global='yes' is invalid: expected true or false"),
    ("skill_position", "end", "skill_position='end' is invalid"),
])
def test_invalid_values_name_field_value_and_fix(field, value, needle):
    with pytest.raises(ConfigError) as err:
        SkillDuetConfig.from_dict({field: value})
    assert needle in str(err.value)


def test_unknown_keys_are_rejected_with_the_allowed_list():
    with pytest.raises(ConfigError, match="unknown setting\\(s\\) keep_ratoi: allowed keys are"):
        SkillDuetConfig.from_dict({"keep_ratoi": 0.5})


def test_backend_validation():
    with pytest.raises(ConfigError, match="analyzer.model=''.*required when analyzer.kind='openai'"):
        SkillDuetConfig.from_dict({"analyzer": {"kind": "openai"}})
    with pytest.raises(ConfigError, match="synthesizer.kind='gpt'"):
        SkillDuetConfig.from_dict({"synthesizer": {"kind": "gpt"}})
    with pytest.raises(ConfigError, match="analyzer.base_url='localhost:8000'"):
        SkillDuetConfig.from_dict({"analyzer": {"kind": "openai", "model": "m", "base_url": "localhost:8000"}})
    with pytest.raises(ConfigError, match="unknown setting\\(s\\) analyzer.modle: allowed keys of analyzer are"):
        SkillDuetConfig.from_dict({"analyzer": {"modle": "x"}})
    cfg = SkillDuetConfig.from_dict({"analyzer": {"kind": "openai", "model": "Qwen/Qwen3-32B"}})
    assert cfg.analyzer.model == "Qwen/Qwen3-32B"


def test_inconsistent_switches():
    with pytest.raises(ConfigError, match="extract_local=False is invalid: OPD needs Local skills"):
        SkillDuetConfig.from_dict({"extract_local": False, "use_global": False})
    with pytest.raises(ConfigError, match="use_global=True is invalid"):
        SkillDuetConfig.from_dict({"extract_local": False, "opd_coef": 0.0})


def test_presets_and_roundtrip(tmp_path):
    assert preset("grpo").is_plain_grpo
    assert not preset("skillduet").is_plain_grpo
    assert preset("local_only").use_global is False
    assert preset("random").selector == "random"
    with pytest.raises(ConfigError, match="preset='ppo'"):
        preset("ppo")
    cfg = preset("random", keep_ratio=0.25)
    assert SkillDuetConfig.from_dict(cfg.to_dict()) == cfg
    path = tmp_path / "c.yaml"
    path.write_text("skillduet:\n  keep_ratio: 0.75\n  selector: utility\n")
    loaded = SkillDuetConfig.from_yaml(path)
    assert (loaded.keep_ratio, loaded.selector) == (0.75, "utility")
    assert cfg.replace(seed=3).seed == 3
