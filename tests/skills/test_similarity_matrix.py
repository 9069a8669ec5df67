"""``lexical_matrix`` (word sets and 3-grams built once per text) equals the pairwise ``lexical_similarity``."""

from __future__ import annotations

import pytest

from skillduet_plugin.skills.similarity import lexical_matrix, lexical_similarity


def test_matrix_equals_pairwise_similarity():
    texts = ["- go to the fridge 1\n- open it", "- Open the fridge 1, then go", "", "take apple from table 2",
             "take an apple from the table 2 ", "zzz"]
    m = lexical_matrix(texts)
    for i, a in enumerate(texts):
        assert m[i][i] == 1.0
        for j, b in enumerate(texts):
            if i != j:
                assert m[i][j] == pytest.approx(lexical_similarity(a, b), abs=1e-12)
                assert m[i][j] == m[j][i]
    assert m[3][4] > 0.8 > m[3][5]  # negative control: near-duplicates score high, unrelated text low
