"""Strength / Utility / Contrast and top-k selection against hand-computed values."""

from __future__ import annotations

import math
import random

import pytest
import torch

from skillduet_plugin.core.scores import contrast, response_shift, select_top, strength, utility


def test_response_shift_is_masked_token_mean():
    skill = torch.tensor([[-1.0, -1.0, -5.0], [-2.0, -2.0, -2.0]])
    base = torch.tensor([[-2.0, -3.0, -1.0], [-1.0, -1.0, -1.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 1]])
    shift = response_shift(skill, base, mask)
    assert shift.tolist() == pytest.approx([(1.0 + 2.0) / 2, (-1.0 - 1.0) / 2])


def test_response_shift_without_valid_tokens_is_nan():
    shift = response_shift(torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1, 2))
    assert math.isnan(shift.item())


def test_strength_is_mean_absolute_shift():
    assert strength([0.5, -1.5, 1.0]) == pytest.approx(1.0)
    assert strength(torch.tensor([0.2, float("nan"), -0.4])) == pytest.approx(0.3)


def test_strength_empty_is_none():
    assert strength([]) is None
    assert strength([float("nan")]) is None


def test_utility_is_advantage_weighted_shift():
    assert utility([0.5, -1.0, 2.0], [1.0, -2.0, 0.5]) == pytest.approx((0.5 + 2.0 + 1.0) / 3)
    assert utility([], []) is None
    with pytest.raises(ValueError, match="one advantage per shift"):
        utility([1.0], [1.0, 2.0])


def test_contrast_by_hand_and_undefined_cases():
    shifts = [1.0, 3.0, -1.0, 0.0]
    success = [True, True, False, False]
    assert contrast(shifts, success) == pytest.approx(2.0 - (-0.5))
    assert contrast([1.0, 2.0], [True, True]) is None  # no failure
    assert contrast([1.0, 2.0], [False, False]) is None  # no success
    assert contrast([], []) is None


def test_select_top_keeps_ceil_ratio_by_score_with_id_tiebreak():
    ids = ["d", "a", "c", "b", "e"]
    scores = [0.1, 0.9, 0.5, 0.5, None]
    kept, rejected = select_top(ids, scores, keep_ratio=0.5)
    assert kept == ["a", "b", "c"]  # ceil(2.5) = 3; tie 0.5 broken by id
    assert rejected == ["d", "e"]  # None ranks last
    # order of input does not matter
    kept2, _ = select_top(list(reversed(ids)), list(reversed(scores)), keep_ratio=0.5)
    assert kept2 == kept


def test_select_top_random_is_seeded_and_ignores_scores():
    ids = [f"s{i}" for i in range(10)]
    scores = list(range(10))
    a = select_top(ids, scores, 0.5, rng=random.Random(7), shuffle=True)
    b = select_top(list(reversed(ids)), list(reversed(scores)), 0.5, rng=random.Random(7), shuffle=True)
    assert a == b
    # the selection is the seeded shuffle of the ids in sorted order, computed here on its own; it is neither the
    # score ranking nor the input order, and another seed draws another half
    reference = sorted(ids)
    random.Random(7).shuffle(reference)
    assert a == (reference[:5], reference[5:])
    assert a[0] == ["s8", "s3", "s1", "s4", "s7"]
    strength_kept, _ = select_top(ids, scores, 0.5)
    assert strength_kept == ["s9", "s8", "s7", "s6", "s5"]
    assert set(a[0]) != set(strength_kept) and a[0] != ids[:5]
    assert select_top(ids, scores, 0.5, rng=random.Random(8), shuffle=True)[0] != a[0]
    with pytest.raises(ValueError, match="rng"):
        select_top(ids, scores, 0.5, shuffle=True)


def test_select_top_edge_cases():
    assert select_top([], [], 0.5) == ([], [])
    assert select_top(["x"], [None], 0.1) == (["x"], [])
    with pytest.raises(ValueError, match="keep_ratio"):
        select_top(["x"], [1.0], 1.5)
