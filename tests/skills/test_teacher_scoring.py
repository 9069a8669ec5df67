"""Strength/Utility/Contrast from the teacher pass (heldout="teacher"): free rows, budgeted extra rows,
near-duplicate aliases, against hand-computed values; and the selector registry."""

from __future__ import annotations

import pytest
import torch

from skillduet_plugin.config import SkillDuetConfig
from skillduet_plugin.core.selectors import SELECTORS, get_selector, register_selector, score_names
from skillduet_plugin.skills.teacher_scoring import (paid_logprobs, plan_scoring, score_from_plan,
                                                     score_teacher_pass)
from skillduet_plugin.skills.types import Skill

from skills_fakes import make_traj

DEDUPE = SkillDuetConfig().dedupe_threshold

# make_traj(completion_len=6): mask [0,1,1,0,1,1] (4 valid tokens), base log-probs -1.0, -1.1, ..., -1.5


def _shifted(traj, bump: float) -> torch.Tensor:
    """base + bump on tokens 1 and 4, +7 on token 3 (masked): the shift is 2 * bump / 4 = bump / 2."""
    base = torch.tensor(traj.base_logps)
    return base + torch.tensor([0.0, bump, 0.0, 7.0, bump, 0.0])


def _no_forward(contexts, responses):
    raise AssertionError(f"no forward expected, got {len(contexts)} sequences")


def _ctx(traj, skill):
    return [1, 2, 3, 4]  # 4 context tokens: a paid row costs 4 + 6 = 10 tokens


def _paired_group():
    trajs = [make_traj("s1", "tA", completion_len=6, success=True, advantage=1.0),
             make_traj("f1", "tA", completion_len=6, success=False, advantage=-1.0),
             make_traj("h1", "tA", completion_len=6, success=True, advantage=1.0),
             make_traj("h2", "tA", completion_len=6, success=False, advantage=-1.0)]
    shared = Skill(text="shared advice for tA", scope="clean", kind="shared", source_traj_ids=("s1", "f1"), step=1)
    assignment = {t.traj_id: shared.skill_id for t in trajs}
    # the sources' teacher rows carry a huge shift: counting them (they made the skill) would show at once
    teacher = {"s1": _shifted(trajs[0], 10.0), "f1": _shifted(trajs[1], 10.0),
               "h1": _shifted(trajs[2], 0.8), "h2": _shifted(trajs[3], -0.4)}
    return trajs, shared, assignment, teacher


def test_free_rows_give_hand_computed_scores_without_a_forward():
    trajs, shared, assignment, teacher = _paired_group()
    scores, plan = score_teacher_pass([shared], trajs, assignment, teacher, _no_forward, _ctx, budget_tokens=1000,
                                      max_heldout=8, dedupe_threshold=DEDUPE)
    sc = scores[shared.skill_id]
    # Delta_h1 = 0.8 / 2 = 0.4, Delta_h2 = -0.4 / 2 = -0.2
    assert sc.n_heldout == 2 and sc.shifts == pytest.approx({"h1": 0.4, "h2": -0.2})
    assert sc.strength == pytest.approx((0.4 + 0.2) / 2)                   # mean |Delta|
    assert sc.utility == pytest.approx((1.0 * 0.4 + (-1.0) * (-0.2)) / 2)  # mean A * Delta
    assert sc.contrast == pytest.approx(0.4 - (-0.2))                      # mean success - mean failure
    assert plan.free == {shared.skill_id: ["h1", "h2"]} and plan.paid_tokens == 0
    # negative control through the same code: a skill that names no sources scores every row as held-out, the
    # two huge source shifts included, and its Strength is the far larger mean that counting them would give
    unsourced = Skill(text=shared.text, scope="clean", kind="shared", source_traj_ids=(), step=1)
    wrong, _ = score_teacher_pass([unsourced], trajs, {t.traj_id: unsourced.skill_id for t in trajs}, teacher,
                                  _no_forward, _ctx, budget_tokens=1000, max_heldout=8, dedupe_threshold=DEDUPE)
    assert wrong[unsourced.skill_id].strength == pytest.approx((0.4 + 0.2 + 5.0 + 5.0) / 4)
    assert abs(sc.strength - wrong[unsourced.skill_id].strength) > 1.0


def test_missing_teacher_rows_are_computed_in_one_call_and_agree():
    trajs, shared, assignment, teacher = _paired_group()
    calls = []

    def logprob_fn(contexts, responses):
        calls.append(len(contexts))
        return [teacher[tid] for tid in ("h1", "h2")][:len(contexts)]

    scores, _ = score_teacher_pass([shared], trajs, assignment, {}, logprob_fn, _ctx, budget_tokens=0, max_heldout=8,
                                   dedupe_threshold=DEDUPE)
    assert calls == [2] and scores[shared.skill_id].strength == pytest.approx(0.3)


def _uniform_groups():
    trajs = [make_traj("b1", "tB", completion_len=6, advantage=0.0),
             make_traj("b2", "tB", completion_len=6, advantage=0.0),
             make_traj("c1", "tC", completion_len=6, success=True, advantage=0.0)]
    k1 = Skill(text="Correction for tB: do not take the knife before opening the drawer.", scope="clean",
               kind="correction", source_traj_ids=("b1",), step=1)
    k2 = Skill(text="Open every cabinet in the kitchen first, then go to the sink.", scope="clean",
               kind="correction", source_traj_ids=("b2",), step=1)
    # a near-duplicate of k1 (one word changed), from another trajectory
    k3 = Skill(text="Correction for tB: do not take the knife before opening a drawer.", scope="clean",
               kind="correction", source_traj_ids=("c1",), step=1)
    assignment = {"b1": k1.skill_id, "b2": k2.skill_id, "c1": k3.skill_id}  # hindsight: each its own skill
    return trajs, [k1, k2, k3], assignment


def test_paid_rows_round_robin_under_the_token_budget_and_near_duplicates_scored_once():
    trajs, (k1, k2, k3), assignment = _uniform_groups()
    plan = plan_scoring([k1, k2, k3], trajs, assignment, context_fn=_ctx, budget_tokens=25, max_heldout=8,
                        dedupe_threshold=DEDUPE)
    assert plan.free == {k1.skill_id: [], k2.skill_id: [], k3.skill_id: []}
    rep = min(k1.skill_id, k3.skill_id)  # the cluster's representative: the smaller id
    dup = max(k1.skill_id, k3.skill_id)
    assert plan.alias == {dup: rep}
    # 25 tokens buy two 10-token rows: one each (round-robin), not two for the first candidate
    assert sorted(len(v) for v in plan.paid.values()) == [1, 1] and plan.paid_tokens == 20
    assert set(plan.paid) == {rep, k2.skill_id}
    bumps = {(rep, plan.paid[rep][0]): 0.6, (k2.skill_id, plan.paid[k2.skill_id][0]): -1.0}
    by_id = {t.traj_id: t for t in trajs}

    def logprob_fn(contexts, responses):
        assert len(contexts) == 2
        return [_shifted(by_id[tid], bumps[(sid, tid)]) for sid, tid in plan.paid_pairs()]

    paid = paid_logprobs(plan, trajs, logprob_fn)
    scores = score_from_plan([k1, k2, k3], trajs, plan, {}, paid)
    assert scores[rep].strength == pytest.approx(0.3) and scores[rep].n_heldout == 1
    assert scores[k2.skill_id].strength == pytest.approx(0.5)
    assert scores[dup].strength == pytest.approx(0.3) and scores[dup].note == f"near_duplicate_of:{rep}"
    assert scores[rep].contrast is None  # one row: undefined, never a silent 0


def test_zero_budget_leaves_candidates_unscored_with_the_reason():
    trajs, skills, assignment = _uniform_groups()
    plan = plan_scoring(skills, trajs, assignment, context_fn=_ctx, budget_tokens=9, max_heldout=8,
                        dedupe_threshold=DEDUPE)
    assert plan.paid_pairs() == [] and sorted(plan.unscored.values()) == ["budget", "budget"]
    scores = score_from_plan(skills, trajs, plan, {}, {})
    assert all(sc.strength is None for sc in scores.values())
    assert {sc.note.split(":")[0] for sc in scores.values()} == {"budget", "near_duplicate_of"}


def test_selector_registry_declares_the_scores_and_names_the_registered_ones():
    assert SELECTORS.names() == ["contrast", "random", "strength", "utility"]
    assert score_names() == ["contrast", "strength", "utility"]  # random ranks by a shuffle: no score of its own
    assert get_selector("strength").compute([0.5, -0.25], [1.0, 1.0], [True, False]) == pytest.approx(0.375)
    assert get_selector("contrast").compute([0.5, -0.25], [1.0, 1.0], [True, False]) == pytest.approx(0.75)
    random_selector = get_selector("random")
    assert (random_selector.compute, random_selector.shuffle, random_selector.score) == (None, True, "strength")
    with pytest.raises(KeyError, match="selector='strenght' is invalid: registered selectors are contrast, random, "
                                       "strength, utility"):
        get_selector("strenght")
    with pytest.raises(ValueError, match="already registered"):
        register_selector("strength")(lambda s, a, ok: 0.0)
    assert register_selector("strength")(get_selector("strength").compute)  # the same function: no error
