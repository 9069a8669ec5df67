"""A selector registered outside the package (here, in this test module) works end to end: the config accepts
it, every candidate gets its score, the bank stores it, consolidation ranks by it and ``skillduet skills show``
prints it. This is the "how to add a selector" recipe of docs/ARCHITECTURE.md."""

from __future__ import annotations

import pytest

from skillduet_plugin.cli import main
from skillduet_plugin.config import ConfigError, SkillDuetConfig
from skillduet_plugin.core.conversation import ChatTokenizer
from skillduet_plugin.core.selectors import SELECTORS, register_selector
from skillduet_plugin.skills.bank import BANK_FILENAME
from skillduet_plugin.skills.lifecycle import SkillLifecycle

from skills_fakes import FakeBackend
from test_skill_lifecycle import _length_logprob_fn, _step_trajectories


def subtlest(shifts, advantages, successes):
    """The opposite of Strength: the candidate that moves the policy least ranks first."""
    values = [abs(v) for v in shifts]
    return -sum(values) / len(values) if values else None


@pytest.fixture()
def registered():
    register_selector("subtlest")(subtlest)
    yield
    SELECTORS.unregister("subtlest")


def _step(tmp_path, tokenizer, selector: str):
    cfg = SkillDuetConfig(consolidation_interval=1, selector=selector, skill_token_budget=400)
    lc = SkillLifecycle(cfg, tmp_path / BANK_FILENAME, tokenizer=tokenizer, analyzer=FakeBackend(),
                        synthesizer=FakeBackend(), similarity=None)
    trajs = _step_trajectories(1, ChatTokenizer(tokenizer), lc)
    result = lc.extract(trajs, 1)
    scores = lc.score(result.skills, trajs, _length_logprob_fn, assignment=result.assignment)
    reports = lc.end_step(1)
    return lc, scores, {r.scope: r for r in reports}


def test_an_unregistered_selector_is_a_config_error():
    with pytest.raises(ConfigError, match="selector='subtlest' is invalid: allowed values are contrast, random, "
                                          "strength, utility"):
        SkillDuetConfig(selector="subtlest")


def test_a_selector_registered_in_a_test_runs_through_every_layer(registered, tmp_path, tiny_tokenizer, capsys):
    lc, scores, reports = _step(tmp_path / "subtlest", tiny_tokenizer, "subtlest")
    scored = [v for v in scores.values() if v["strength"] is not None]
    assert scored and all(v["subtlest"] == pytest.approx(-v["strength"]) for v in scored)  # computed
    stored = {s.skill_id: s.scores for s in lc.bank.candidates()}
    assert {sid: v["subtlest"] for sid, v in stored.items()} == {sid: v["subtlest"] for sid, v in scores.items()}

    _, _, by_strength = _step(tmp_path / "strength", tiny_tokenizer, "strength")
    for scope, report in reports.items():
        assert report.selector == "subtlest"
        below = [r["skill_id"] for r in report.rejected if r["reason"] == "below_top_k"]
        assert below and all("subtlest=" in r["detail"] for r in report.rejected if r["reason"] == "below_top_k")
        # ranked by the new score: the kept candidates moved the policy least ...
        assert max(stored[k]["strength"] for k in report.kept) <= min(stored[b]["strength"] for b in below)
        # ... the opposite of the Strength ranking on the same step (so the ranking is not Strength's)
        assert set(report.kept) != set(by_strength[scope].kept)
    assert [v.selector for v in lc.bank.history()] == ["subtlest"] * len(reports)
    lc.close()

    assert main(["skills", "show", str(tmp_path / "subtlest"), "--candidates", "50"]) == 0
    out = capsys.readouterr().out
    assert "subtlest" in out.split("Local candidates")[1]
    first = next(iter(v for v in scores.values() if v["subtlest"] is not None))
    assert f"{first['subtlest']:.4g}" in out


def test_every_list_of_selector_names_takes_a_registered_selector(registered):
    """The tracker's columns, ``skillduet score``'s columns, the study's arms and a score's attributes all come from
    the registry (negative control: the same lookups after unregistering refuse or omit it)."""
    from skillduet_plugin import study
    from skillduet_plugin.skills.scoring import summarize
    from skillduet_plugin.skills.tracking import local_columns

    assert "subtlest" in local_columns()
    label, overlay = study.arm_overlay("subtlest")
    assert (label, overlay["method"], overlay["selector"]) == ("SkillDuet (Subtlest)", "skillduet", "subtlest")
    assert study.arm_overlay("subtlest_keep0.25")[1]["keep_ratio"] == 0.25
    assert summarize("s1", [], []).subtlest is None  # no held-out rows: undefined
    SELECTORS.unregister("subtlest")
    assert "subtlest" not in local_columns()
    with pytest.raises(ConfigError, match="arm 'subtlest' is invalid"):
        study.arm_overlay("subtlest")
    with pytest.raises(AttributeError, match="no score 'subtlest'"):
        summarize("s1", [], []).subtlest
