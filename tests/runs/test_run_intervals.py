"""The demo's before/after comparison: a paired bootstrap interval over the same tasks, and the study's
``--jobs`` check, both before any work starts."""

from __future__ import annotations

import pytest

from skillduet_plugin.config import ConfigError
from skillduet_plugin.runs.summary import interval_text, paired_difference


def _res(outcomes: dict[str, float]) -> dict:
    return {"conditions": {"none": {"outcomes": outcomes, "success": sum(outcomes.values()) / len(outcomes)}}}


def test_paired_difference_is_after_minus_before_over_the_same_tasks():
    before = _res({"a": 0.0, "b": 1.0, "c": 0.0, "d": 0.0})
    after = _res({"a": 1.0, "b": 1.0, "c": 1.0, "d": 0.0, "extra": 1.0})  # a task only one side has is left out
    d = paired_difference(before, after)
    assert d["tasks"] == 4
    assert d["estimate"] == pytest.approx(0.5)  # (1 + 0 + 1 + 0) / 4, by hand
    # per-task differences are 0 or 1: every bootstrap mean lies in [0, 1], and 0.5 is inside the interval
    assert 0.0 <= d["low"] <= 0.5 <= d["high"] <= 1.0
    assert "+50.0 points" in interval_text(d) and "4 tasks" in interval_text(d)


def test_no_change_gives_a_zero_interval_and_missing_results_give_none():
    same = _res({"a": 1.0, "b": 0.0, "c": 1.0})
    d = paired_difference(same, same)
    assert (d["estimate"], d["low"], d["high"]) == (0.0, 0.0, 0.0)  # negative control: nothing can differ
    assert paired_difference(None, same) is None and paired_difference(same, {"conditions": {}}) is None
    assert interval_text(None) == "n/a"


def test_a_worse_run_has_an_interval_below_zero():
    before = _res({str(i): 1.0 for i in range(12)})
    after = _res({str(i): 0.0 if i < 10 else 1.0 for i in range(12)})
    d = paired_difference(before, after)
    assert d["estimate"] == pytest.approx(-10 / 12) and d["high"] < 0


@pytest.mark.parametrize("jobs", [0, -1, True, 1.5])
def test_study_jobs_must_be_a_positive_integer(tmp_path, jobs):
    from skillduet_plugin.study import StudySpec, run_study

    with pytest.raises(ConfigError, match="--jobs"):
        run_study(tmp_path / "s", StudySpec(), jobs=jobs)
    assert not (tmp_path / "s").exists()  # refused before any work


def test_score_difference_reads_the_per_task_scores():
    before = {"conditions": {"none": {"outcomes": {"a": 0.0, "b": 0.0}, "scores": {"a": 0.2, "b": 0.5}}}}
    after = {"conditions": {"none": {"outcomes": {"a": 0.0, "b": 0.0}, "scores": {"a": 0.6, "b": 0.7}}}}
    assert paired_difference(before, after)["estimate"] == 0.0  # no success either time
    d = paired_difference(before, after, field="scores")
    assert d["estimate"] == pytest.approx(0.3)  # ((0.6 - 0.2) + (0.7 - 0.5)) / 2, by hand
    assert d["low"] == pytest.approx(0.2) and d["high"] == pytest.approx(0.4)  # the two per-task differences


def test_sampled_differences_pair_the_per_task_means():
    from skillduet_plugin.runs.summary import sampled_differences, training_line

    before = {"sampled": {"samples": 4, "success": 0.375, "score": 0.375, "outcomes": {"a": 0.25, "b": 0.5},
                          "scores": {"a": 0.25, "b": 0.5}}}
    after = {"sampled": {"samples": 4, "success": 0.75, "score": 0.75, "outcomes": {"a": 0.75, "b": 0.75},
                         "scores": {"a": 0.75, "b": 0.75}}}
    d = sampled_differences(before, after)
    assert (d["samples"], d["success_before"], d["success_after"]) == (4, 0.375, 0.75)
    assert d["difference"]["estimate"] == pytest.approx(0.375)  # ((0.75 - 0.25) + (0.75 - 0.5)) / 2
    assert d["difference"]["low"] == pytest.approx(0.25) and d["difference"]["high"] == pytest.approx(0.5)
    assert sampled_differences({}, None) is None
    line = training_line({"split": "train", "tasks": 2, "success_before": 0.5, "success_after": 0.5,
                          "difference": None, "sampled": d})
    assert "sampled policy (4 episodes per task) 37.5% -> 75.0%, +37.5 points" in line


@pytest.mark.parametrize("overrides", [[], ["task_types=pick,look"], ["task_types=null"]])
def test_study_arms_play_the_base_configs_task_types(tmp_path, overrides):
    """The arms run the shared model folder, not ``tiny``: ``task_types: auto`` must not re-resolve for them
    (it would add pick2 to the demo's five single-object types)."""
    from skillduet_plugin.runs.config import load_run_config
    from skillduet_plugin.study import PlannedRun, StudySpec, run_config

    spec = StudySpec(overrides=tuple(overrides))
    base = load_run_config(None, list(overrides))
    arm = run_config(spec, base, tmp_path / "shared_model", PlannedRun("grpo", 1), tmp_path / "run")
    assert arm.task_type_list == base.task_type_list
    assert arm.model != "tiny" and arm.seed == 1
    if not overrides:
        assert base.task_type_list == ["pick", "look", "clean", "heat", "cool"]  # the demo's auto
