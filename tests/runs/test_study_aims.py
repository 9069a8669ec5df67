"""The study's aims table: paired differences over the seeds both arms finished, the SkillDuet arm read under
the condition the aim names (as deployed = with its learned Global), checked against hand-computed values."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from skillduet_plugin.reporting.study_aims import aims_section, outcome_matrix, paired, with_sampled
from skillduet_plugin.reporting.study_report import _pct, _table, _verdict


def _cond(outcomes):
    return {"outcomes": {f"t{i}": v for i, v in enumerate(outcomes)}}


def _arm(name, seeds, train, panel=None):
    """``train``/``panel``: per seed, condition -> per-task outcomes."""
    to_evals = [{c: _cond(v) for c, v in per_seed.items()} for per_seed in (train if panel is None else panel)]
    return SimpleNamespace(arm=name, label=name, seeds=list(seeds), evals=to_evals,
                           train_evals=[{c: _cond(v) for c, v in per_seed.items()} for per_seed in train])


def test_with_sampled_keeps_both_sampled_measurements():
    result = {"conditions": {"none": 1}, "sampled": {"outcomes": {}}, "sampled_learned": {"outcomes": {"a": 1}}}
    assert set(with_sampled(result)) == {"none", "sampled", "sampled_learned"}
    assert set(with_sampled({"conditions": {"none": 1}, "sampled": {}})) == {"none"}  # an empty one is absent


def test_paired_difference_on_common_seeds_under_the_named_conditions():
    strength = _arm("strength", [1, 2], [{"sampled": [0, 0, 0], "sampled_learned": [1, 1, 0.5]},
                                         {"sampled": [0, 0, 0], "sampled_learned": [1, 0.5, 0.5]}])
    grpo = _arm("grpo", [2, 3], [{"sampled": [0.5, 0.5, 0.5]}, {"sampled": [0, 0, 0]}])
    arms = {"strength": strength, "grpo": grpo}
    iv, seeds = paired(arms, "strength", "sampled_learned", "grpo", "sampled", "train")
    assert seeds == [2]  # seed 1 has no GRPO run, seed 3 no Strength run
    assert iv.estimate == pytest.approx((1 + 0.5 + 0.5) / 3 - 0.5)
    none_iv, _ = paired(arms, "strength", "sampled", "grpo", "sampled", "train")
    assert none_iv.estimate == pytest.approx(-0.5)  # the same run without its Global
    assert paired(arms, "strength", "learned", "grpo", "none", "train") == (None, [2])  # not measured
    assert outcome_matrix(strength.train_evals, "sampled_learned") == [[1, 1, 0.5], [1, 0.5, 0.5]]


def test_aims_table_says_met_only_above_zero_beyond_the_interval():
    better = _arm("strength", [0, 1], [{"sampled_learned": [1, 1, 1, 1], "sampled": [0, 0, 0, 0]}] * 2)
    grpo = _arm("grpo", [0, 1], [{"sampled": [0, 0, 0, 0]}] * 2)
    lines = aims_section([better, grpo], _pct, _verdict, _table)
    row = next(line for line in lines if line.startswith("| SkillDuet (Strength) as deployed - GRPO | RL games"))
    assert "+100.0 [+100.0, +100.0]" in row and row.endswith("| yes |")
    same = _arm("strength", [0, 1], [{"sampled_learned": [0, 0, 0, 0], "sampled": [0, 0, 0, 0]}] * 2)
    lines = aims_section([same, grpo], _pct, _verdict, _table)
    row = next(line for line in lines if line.startswith("| SkillDuet (Strength) as deployed - GRPO | RL games"))
    assert row.endswith("| no |")  # negative control: no difference is not an aim met
    assert aims_section([], _pct, _verdict, _table)[-2] == "No pair of arms has finished runs on common seeds."


def _row(lines, start):
    return next(line for line in lines if line.startswith(start))


def test_report_comparisons_pair_the_arms_by_seed():
    """The comparison tables pair two arms' runs by seed (``paired``), not by list position: with seeds [1, 2]
    and [1, 3] only seed 1 is paired; with [1, 2] against [2, 1] each run meets its own seed."""
    from skillduet_plugin.reporting.study_report import _conclusions, _training_section

    # seed 1: Strength wins every task, GRPO none; Strength's seed 2 and GRPO's seed 3 the other way round
    strength = _arm("strength", [1, 2], [{"none": [1, 1]}, {"none": [0, 0]}])
    grpo = _arm("grpo", [1, 3], [{"none": [0, 0]}, {"none": [1, 1]}])
    panel = _row(_conclusions([strength, grpo]), "| strength - grpo")
    assert panel == "| strength - grpo | 1 | +100.0 [+100.0, +100.0] | above, beyond the interval |"
    before = {"panel_size": 2, "panel": "train", "conditions": {"none": _cond([0, 0])}}
    training = _row(_training_section([strength, grpo], before), "| strength - grpo")
    assert training == "| strength - grpo | 1 | +100.0 [+100.0, +100.0] | above, beyond the interval |"

    # the same seeds listed in another order: by seed, Strength is 50 points above on every seed and task
    strength = _arm("strength", [1, 2], [{"none": [1, 1]}, {"none": [0.5, 0.5]}])
    grpo = _arm("grpo", [2, 1], [{"none": [0, 0]}, {"none": [0.5, 0.5]}])
    assert _row(_conclusions([strength, grpo]), "| strength - grpo") == \
        "| strength - grpo | 2 | +50.0 [+50.0, +50.0] | above, beyond the interval |"
    assert _row(_training_section([strength, grpo], before), "| strength - grpo") == \
        "| strength - grpo | 2 | +50.0 [+50.0, +50.0] | above, beyond the interval |"

    # unequal counts: the common seed is paired, not "not comparable"
    grpo = _arm("grpo", [1], [{"none": [0, 0]}])
    strength = _arm("strength", [1, 2], [{"none": [1, 1]}, {"none": [0, 0]}])
    assert _row(_conclusions([strength, grpo]), "| strength - grpo") == \
        "| strength - grpo | 1 | +100.0 [+100.0, +100.0] | above, beyond the interval |"


def _arm_by_id(name, seeds, outcomes):
    """One condition ("sampled") per seed with ``outcomes`` as given: a dict task id -> outcome, in its own order."""
    evals = [{"sampled": {"outcomes": dict(per_seed)}} for per_seed in outcomes]
    return SimpleNamespace(arm=name, label=name, seeds=list(seeds), evals=evals, train_evals=evals)


def test_paired_matches_games_by_id_not_by_position():
    games = {"a": 1.0, "b": 0.0, "c": 0.0}
    reordered = dict(reversed(list(games.items())))  # the same outcomes, listed c, b, a
    arms = {"x": _arm_by_id("x", [1], [games]), "y": _arm_by_id("y", [1], [reordered])}
    iv, seeds = paired(arms, "x", "sampled", "y", "sampled", "train")
    assert seeds == [1] and iv.estimate == 0.0 and (iv.low, iv.high) == (0.0, 0.0)
    other = {"a": 1.0, "b": 0.0, "d": 0.0}  # as many games, one of them another game: nothing to pair
    arms["z"] = _arm_by_id("z", [1], [other])
    assert paired(arms, "x", "sampled", "z", "sampled", "train") == (None, [1])


def test_outcome_matrix_orders_games_by_id_and_refuses_seeds_with_other_games():
    arm = _arm_by_id("x", [1, 2], [{"b": 0.0, "a": 1.0}, {"a": 0.5, "b": 0.25}])
    assert outcome_matrix(arm.evals, "sampled") == [[1.0, 0.0], [0.5, 0.25]]  # columns a, b in both rows
    arm = _arm_by_id("x", [1, 2], [{"a": 1.0, "b": 0.0}, {"a": 0.5, "c": 0.25}])
    assert outcome_matrix(arm.evals, "sampled") is None
