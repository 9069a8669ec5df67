"""The ``skillduet`` command line takes options, the config file and ``key=value`` overrides in any order."""

from __future__ import annotations

import pytest

from skillduet_plugin.cli import command_parser, main

CONFIG = "examples/cpu_reading.yaml"


@pytest.fixture()
def root(monkeypatch):
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(repo)
    return repo


def _printed(capsys, argv: list[str]) -> str:
    assert main(argv) == 0
    return capsys.readouterr().out


def test_train_options_and_overrides_in_any_order(root, capsys, tmp_path):
    out = str(tmp_path / "run")
    orders = [
        ["train", CONFIG, "--output-dir", out, "skillduet.opd_coef=1.0", "steps=3", "--print-config"],
        ["train", "--output-dir", out, CONFIG, "skillduet.opd_coef=1.0", "steps=3", "--print-config"],
        ["train", "--print-config", "skillduet.opd_coef=1.0", "--output-dir", out, CONFIG, "steps=3"],
        ["train", "skillduet.opd_coef=1.0", "--print-config", "steps=3", CONFIG, "--output-dir", out],
    ]
    printed = [_printed(capsys, argv) for argv in orders]
    assert all(p == printed[0] for p in printed)
    assert "  opd_coef: 1.0\n" in printed[0] and "\nsteps: 3\n" in printed[0]
    assert f"output_dir: {out}\n" in printed[0]
    # the config file is read, not the demo's defaults: the reading example's warm-start design
    assert "design: reading" in printed[0]
    # negative control: argparse's plain parsing refuses every order with an option between the positionals
    for argv in (orders[0], orders[2], orders[3]):
        with pytest.raises(SystemExit):
            command_parser("train").parse_args(argv[1:])


def test_study_options_and_overrides_in_any_order(root, capsys, tmp_path):
    out = str(tmp_path / "study")
    a = _printed(capsys, ["study", "--print-plan", "--output-dir", out, "steps=3", "--seeds", "0"])
    b = _printed(capsys, ["study", "steps=3", "--seeds", "0", "--print-plan", "--output-dir", out])
    assert a == b and "strength-s0:" in a and "steps=3" in a


def test_two_config_files_are_one_line_error(root, capsys):
    assert main(["train", "a.yaml", "--print-config", "b.yaml"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("skillduet train: config='b.yaml' is invalid: give one YAML config file (got a.yaml, b.yaml); "
                   "settings go as key=value")


def test_commands_with_their_own_subcommands_still_parse(root, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["skills", "--help"])
    assert exc.value.code == 0
    assert "usage: skillduet skills" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert main([]) == 0 and "COMMAND" in capsys.readouterr().out
