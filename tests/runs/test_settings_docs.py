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
