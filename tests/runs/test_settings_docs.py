"""docs/configuration.md and `skillduet train --help` are rendered from the fields' own help texts."""

from __future__ import annotations

from pathlib import Path

import pytest

from skillduet_plugin.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_configuration_doc_is_current():
    pytest.importorskip("trl")
    pytest.importorskip("verl")
    from skillduet_plugin.runs.settings_docs import render

    assert (ROOT / "docs" / "configuration.md").read_text() == render(), (
        "regenerate: python -m skillduet_plugin.runs.settings_docs > docs/configuration.md")


def test_train_help_lists_every_setting(capsys):
    from skillduet_plugin.runs.config import RunConfig

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    for key in ("steps (default 10)", "warm_start.games (default 72)", "skillduet.keep_ratio (default 0.5)",
                "skillduet.analyzer.kind (default offline)", "trl (default {})"):
        assert key in out
    assert RunConfig.__dataclass_fields__["steps"].metadata["help"].split(";")[0] in out


#: the longest help a setting or a command-line option may have: what it does, in a sentence or two; the reasons
#: and the measurements behind a default belong in docs/
HELP_CHARS = 200


def long_helps() -> list[str]:
    """``owner.field (length)`` of every help text of ours over :data:`HELP_CHARS`: the settings classes (TRL's
    own fields of the TRL config excepted) and every command's options."""
    import dataclasses

    from skillduet_plugin.cli import COMMANDS, command_parser
    from skillduet_plugin.config import SkillDuetConfig
    from skillduet_plugin.core.episode import EpisodeSettings
    from skillduet_plugin.llm.config import BackendConfig
    from skillduet_plugin.runs.config import RunConfig, WarmStartConfig

    classes: list = [SkillDuetConfig, EpisodeSettings, BackendConfig, RunConfig, WarmStartConfig]
    inherited: set[str] = set()
    try:
        from trl import GRPOConfig

        from skillduet_plugin.integrations.trl.config import SkillDuetGRPOConfig
        classes.append(SkillDuetGRPOConfig)
        inherited = {f.name for f in dataclasses.fields(GRPOConfig)}
    except ImportError:
        pass
    try:
        from skillduet_plugin.integrations.verl.settings import EnvSettings, VerlSettings
        classes += [EnvSettings, VerlSettings]
    except ImportError:
        pass
    found = [f"{cls.__name__}.{f.name} ({len(f.metadata['help'])})" for cls in classes for f in dataclasses.fields(cls)
             if len(f.metadata.get("help", "")) > HELP_CHARS
             and not (cls.__name__ == "SkillDuetGRPOConfig" and f.name in inherited)]
    for command in COMMANDS:
        found += [f"skillduet {command} {'/'.join(a.option_strings) or a.dest} ({len(a.help)})"
                  for a in command_parser(command)._actions if a.help and len(a.help) > HELP_CHARS]
    return found


def test_help_texts_say_what_a_setting_does_in_a_sentence_or_two(monkeypatch):
    assert long_helps() == []
    # negative control: a long help text added to one setting is found
    from skillduet_plugin.config import SkillDuetConfig

    field = SkillDuetConfig.__dataclass_fields__["keep_ratio"]
    monkeypatch.setattr(field, "metadata", {**field.metadata, "help": "x" * (HELP_CHARS + 1)})
    assert long_helps() == [f"SkillDuetConfig.keep_ratio ({HELP_CHARS + 1})"]
