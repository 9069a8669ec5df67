"""The vectorised near-duplicate pass (``skills.near_duplicates``) makes exactly the pairwise loop's decisions,
with the same reported similarities, including when the vocabulary overflows into hashed buckets."""

from __future__ import annotations

import random

import numpy as np
import pytest

from skillduet_plugin.skills.consolidate import _greedy_matches, dedupe
from skillduet_plugin.skills.near_duplicates import LexicalIndex, first_near_duplicates
from skillduet_plugin.skills.similarity import lexical_matrix
from skillduet_plugin.skills.types import Skill

_WORDS = ("go to the fridge open take apple mug cabinet heat microwave put cool clean sinkbasin then first check "
          "drawer shelf before after never").split()


def _texts(n: int, seed: int = 0) -> list[str]:
    """Random skill-like texts, 40 % of them copies of an earlier one with one character changed (or none)."""
    rng = random.Random(seed)
    out: list[str] = ["", ""]  # two empty texts: Jaccard 1.0 between them, cosine 0.0
    while len(out) < n:
        if len(out) > 2 and rng.random() < 0.4:
            chars = list(rng.choice(out))
            if chars and rng.random() < 0.7:
                chars[rng.randrange(len(chars))] = rng.choice("abxyz ")
            out.append("".join(chars))
        else:
            out.append("- " + " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 30))))
    return out


def _index_pass(texts: list[str], threshold: float, block: int, **kw) -> list[tuple[int, int | None, float]]:
    index = LexicalIndex(texts, **kw)
    kept = np.zeros(len(texts), dtype=bool)
    out: list[tuple[int, int | None, float]] = []
    for start in range(0, len(texts), block):
        sims = index.block(start, min(len(texts), start + block), threshold)
        for i in range(start, min(len(texts), start + block)):
            row = sims[i - start, :i]
            cand = np.flatnonzero(kept[:i] & (row >= threshold))
            if cand.size:
                j = int(cand[np.argmax(row[cand])])
                out.append((i, j, float(row[j])))
            else:
                kept[i] = True
                out.append((i, None, 0.0))
    return out


@pytest.mark.parametrize("threshold", [0.9, 0.6, 0.3])
def test_same_decisions_and_similarities_as_the_pairwise_loop(threshold):
    texts = _texts(150)
    expected = _greedy_matches(lexical_matrix(texts), threshold)
    assert list(first_near_duplicates(texts, threshold, block=37)) == expected
    # a vocabulary larger than the columns: rare features share hashed buckets (upper bounds, then re-checked)
    assert _index_pass(texts, threshold, 50, columns=24, buckets=8) == expected
    assert _index_pass(texts, threshold, 50, columns=3, buckets=2) == expected
    # negative control: the texts do contain near-duplicates, so the comparison is not vacuous
    assert sum(j is not None for _, j, _ in expected) > 10


def test_entries_at_or_above_the_threshold_are_exact():
    texts = _texts(120, seed=3)
    exact = np.array(lexical_matrix(texts))
    sims = LexicalIndex(texts, columns=16, buckets=8).block(0, len(texts), 0.5)
    high = exact >= 0.5
    assert np.array_equal(sims[high], exact[high])  # bit for bit, not approximately
    assert (sims[~high] < 0.5).all()
    assert (sims[~high] != exact[~high]).any()  # some entries below the threshold are bounds, not values


def test_dedupe_uses_the_vectorised_pass_with_the_loops_results():
    rng = random.Random(1)
    cands = [Skill(text=t, scope="s", kind="procedure", step=1 + i // 50, scores={"strength": rng.random()})
             for i, t in enumerate(_texts(160, seed=2))]
    fast = dedupe(cands, selector="strength", threshold=0.9)
    loop = dedupe(cands, selector="strength", threshold=0.9, similarity=lexical_matrix)
    assert [s.skill_id for s in fast[0]] == [s.skill_id for s in loop[0]]
    assert fast[1] == loop[1]
    assert any(r["reason"] == "near_duplicate" for r in fast[1])


def test_bucket_settings_are_checked():
    with pytest.raises(ValueError, match="buckets=0"):
        LexicalIndex(["a"], columns=4, buckets=0)
