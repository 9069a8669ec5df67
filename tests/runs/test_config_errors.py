"""Config errors stop `skillduet train` before any work: one line naming the field, the value and the fix, exit 2.

Each case failed on the earlier code: a YAML syntax error printed a yaml.scanner traceback, a missing model folder
a traceback, ``trl.bogus_key`` a TypeError only after the warm start and the first evaluation, and an unknown
``skillduet.*`` key printed its ``skillduet.`` prefix in front of the message instead of in front of the key.
"""

from __future__ import annotations

import pytest

from skillduet_plugin.cli import main


def _train(capsys, *argv: str) -> str:
    """Run `skillduet train --print-config ARGV` in process; return stderr (stdout must stay empty)."""
    rc = main(["train", *argv, "--print-config"])
    out, err = capsys.readouterr()
    assert rc == 2, (out, err)
    assert out == ""
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("skillduet train: ")
    return err.strip()


def test_yaml_syntax_error_is_one_line_with_file_line_and_fix(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nsteps: [1, 2\nmodel: tiny\n")
    err = _train(capsys, str(bad))
    assert f"config file '{bad}' line " in err and "YAML syntax error" in err and "fix the YAML there" in err


def test_trl_keys_are_checked_when_the_command_starts(capsys):
    err = _train(capsys, "trl.bogus_key=1")
    assert "unknown setting(s) trl.bogus_key: (the " in err
    assert " keys of trl are the fields of SkillDuetGRPOConfig)" in err
    err = _train(capsys, "trl.max_grad_nrom=1")  # a near miss is named, not the ~250 GRPOConfig fields
    assert "unknown setting(s) trl.max_grad_nrom: did you mean max_grad_norm" in err and len(err) < 300


def test_missing_model_folder(capsys):
    err = _train(capsys, "model=/nonexistent/model")
    assert err.startswith("skillduet train: model='/nonexistent/model' is invalid: no model folder")
    assert "tiny / tiny:<size>" in err


def test_missing_data_folder(capsys):
    err = _train(capsys, "data_dir=/nonexistent/data")
    assert "data_dir='/nonexistent/data' is invalid: no such folder" in err


@pytest.mark.parametrize("override,needle", [
    ("skillduet.bogus=1", "unknown setting(s) skillduet.bogus: allowed keys of skillduet are "),
    ("skillduet.analyzer.modle=x", "unknown setting(s) skillduet.analyzer.modle: allowed keys of "
                                   "skillduet.analyzer are "),
    ("skillduet.analyzer.kind=gpt", "skillduet.analyzer.kind='gpt' is invalid: allowed values are offline, "),
    ("env=atari", "env='atari' is invalid: allowed values are alfworld, toy, webshop"),
    ("warm_start.bogus=1", "unknown setting(s) warm_start.bogus: allowed keys of warm_start are "),
    ("nope=1", "unknown setting(s) nope: allowed keys are "),
])
def test_every_key_names_itself_in_place(capsys, override, needle):
    err = _train(capsys, override)
    assert err.startswith("skillduet train: " + needle), err


def test_a_good_config_still_prints(capsys):
    assert main(["train", "steps=3", "--print-config"]) == 0
    assert "steps: 3" in capsys.readouterr().out


def test_trl_values_are_type_checked_when_the_command_starts(capsys):
    err = _train(capsys, "trl.num_iterations=often")  # TRL would fail only when it builds its batches
    assert "trl.num_iterations='often' is invalid: expected int (the type of SkillDuetGRPOConfig.num_iterations)" \
        in err
    err = _train(capsys, "trl.use_vllm=yes please")
    assert "trl.use_vllm='yes please' is invalid: expected bool" in err
    err = _train(capsys, "trl.lr_scheduler_type=[1]")
    assert "trl.lr_scheduler_type=[1] is invalid: expected one of linear, cosine" in err


def test_well_typed_trl_values_pass(capsys):
    # Negative control: an int for a float field, an enum's value, null for an optional, a list of str
    rc = main(["train", "trl.max_grad_norm=1", "trl.lr_scheduler_type=cosine", "trl.max_steps=5",
               "trl.hub_model_id=null", "trl.report_to=[none]", "trl.use_vllm=false", "--print-config"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "max_grad_norm: 1" in out


def test_matches_type_unit():
    from typing import Any, Literal, Optional

    from skillduet_plugin.core.settings import matches_type

    assert matches_type(3, float) and not matches_type(True, int) and not matches_type(3.5, int)
    assert matches_type(None, Optional[int]) and not matches_type("x", Optional[int])
    assert matches_type([1.0, 2], list[float]) and not matches_type([1.0, "a"], list[float])
    assert not matches_type(3, list[str])
    assert matches_type("a", Literal["a", "b"]) and not matches_type("c", Literal["a", "b"])
    assert matches_type({"k": 1}, dict[str, Any]) and not matches_type([1], dict[str, Any])


def test_opd_estimator_needs_the_runs_action_mode(capsys):
    err = _train(capsys, "skillduet.opd_estimator=choices", "model=/nonexistent", "action_selection=generate")
    assert err.startswith("skillduet train: skillduet.opd_estimator='choices' is invalid: ")
    assert "action_selection=choose" in err
    err = _train(capsys, "skillduet.opd_estimator=choices", "teacher_at=loss")
    assert "teacher_at=generation" in err
    err = _train(capsys, "skillduet.opd_estimator=dense")
    assert "skillduet.opd_estimator='dense' is invalid" in err and "sampled, choices, topk" in err
    assert main(["train", "skillduet.opd_estimator=choices", "--print-config"]) == 0  # the tiny model chooses
    assert main(["train", "skillduet.opd_estimator=choices", "skillduet.method=grpo", "--print-config"]) == 0
    capsys.readouterr()
