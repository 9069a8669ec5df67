"""``bench/analyzer_quality.py`` in its smallest form: the benchmark's requests (generated ALFWorld games, an expert
success and a random failure, prompt kinds cycled) and the offline analyzer's replies to them, judged."""

from __future__ import annotations

import pytest

pytest.importorskip("alfworld")
pytestmark = pytest.mark.slow


def test_the_offline_analyzer_passes_the_judge_and_names_each_game(tmp_path):
    from bench._analyzer_jobs import KINDS, build_cases, names_game
    from bench.analyzer_quality import _backend, _games, run_config

    cases = build_cases(_games(tmp_path), 3, render_tokens=600)
    assert [c.job.request.payload["kind"] for c in cases] == list(KINDS)
    assert all(c.target and c.actions for c in cases)
    result = run_config("offline", _backend("offline", "free", None, tmp_path), cases)
    assert result["accepted"] == result["parsed"] == 3 and result["rejected"] == {}
    assert result["names_target_or_action"] == 3 and result["accepted_with_structure_or_copy"] == 0
    # negative control: a skill about another game's objects names neither its target nor its actions
    assert not names_game("Open the fridge before you cool the lettuce.", cases[0])
