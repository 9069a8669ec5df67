"""Bootstrap intervals of the study report, against hand-computed values, and the study's arm overlays."""

from __future__ import annotations

import math

import numpy as np
import pytest

from skillduet_plugin.config import ConfigError
from skillduet_plugin.core.stats import bootstrap_interval


def _binomial_quantile(n: int, p: float, q: float) -> float:
    """The q-quantile of Binomial(n, p) / n (smallest k with cdf(k) >= q): the exact bootstrap distribution of
    the mean of n resampled 0/1 outcomes with p = share of ones."""
    cdf = 0.0
    for k in range(n + 1):
        cdf += math.comb(n, k) * p ** k * (1 - p) ** (n - k)
        if cdf >= q:
            return k / n
    return 1.0


def test_one_seed_matches_the_exact_binomial_bootstrap():
    # 3 wins of 10 tasks. The bootstrap mean is Binomial(10, 0.3)/10: cdf(0) = 0.0282 >= 0.025 -> low 0.0;
    # cdf(5) = 0.9527 < 0.975 <= cdf(6) = 0.9894 -> high 0.6 (hand-computed; the helper recomputes them).
    outcomes = [1, 1, 1, 0, 0, 0, 0, 0, 0, 0]
    assert _binomial_quantile(10, 0.3, 0.025) == 0.0 and _binomial_quantile(10, 0.3, 0.975) == 0.6
    iv = bootstrap_interval(outcomes, n_boot=20000, seed=1)
    assert iv.estimate == pytest.approx(0.3)
    assert iv.low == pytest.approx(0.0, abs=1e-9)
    assert iv.high == pytest.approx(0.6, abs=1e-9)
    # 10 of 20: Binomial(20, .5) quantiles 0.30 (cdf(5) = .0207, cdf(6) = .0577) and 0.70 (by symmetry)
    iv = bootstrap_interval([1, 0] * 10, n_boot=20000, seed=2)
    assert (iv.estimate, iv.low, iv.high) == pytest.approx((0.5, 0.3, 0.7), abs=1e-9)


def test_constant_outcomes_give_a_point_and_seeds_are_resampled():
    iv = bootstrap_interval([[1, 1, 1], [1, 1, 1]])
    assert (iv.estimate, iv.low, iv.high) == (1.0, 1.0, 1.0)
    # Negative control: seed-to-seed spread with identical rows inside a seed must widen the interval, which
    # a task-only resampler (or none) would not do: seed 0 wins everything, seed 1 nothing.
    iv = bootstrap_interval([[1, 1, 1, 1], [0, 0, 0, 0]], n_boot=4000)
    assert iv.estimate == 0.5 and iv.low == 0.0 and iv.high == 1.0
    # two seeds drawn with replacement: P(both seed 0) = 1/4, so the interval's ends are exactly 0 and 1.


def test_paired_difference_cancels_task_difficulty():
    rng = np.random.default_rng(0)
    hard = (rng.random((3, 40)) < 0.5).astype(float)
    # b wins exactly where a wins, plus 4 more tasks on every seed: the paired difference is +0.1 every time
    a = hard.copy()
    b = hard.copy()
    a[:, :4] = 0.0
    b[:, :4] = 1.0
    diff = bootstrap_interval(b, a, n_boot=2000)
    assert diff.estimate == pytest.approx(0.1)
    assert 0 < diff.low <= 0.1 <= diff.high
    # unpaired intervals of the two means overlap: only pairing shows the difference is real
    ia, ib = bootstrap_interval(a, n_boot=2000), bootstrap_interval(b, n_boot=2000)
    assert ia.high > ib.low
    # negative control: a method against itself differs by exactly nothing
    same = bootstrap_interval(a, a, n_boot=500)
    assert (same.estimate, same.low, same.high) == (0.0, 0.0, 0.0)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="same seeds"):
        bootstrap_interval([[1, 0]], [[1, 0, 1]])
    with pytest.raises(ValueError, match="level=1.5"):
        bootstrap_interval([1, 0], level=1.5)
    with pytest.raises(ValueError, match="non-empty"):
        bootstrap_interval([])


def test_arm_overlays_and_spec_validation():
    from skillduet_plugin.study import StudySpec, arm_overlay, plan

    assert arm_overlay("grpo")[1] == {"method": "grpo", "opd_coef": 0.0, "use_global": False, "extract_local": False}
    label, overlay = arm_overlay("strength_keep0.25")
    assert overlay["keep_ratio"] == 0.25 and overlay["selector"] == "strength" and "0.25" in label
    for bad in ("bogus", "strength_keep2", "grpo_keep0.5"):
        with pytest.raises(ConfigError, match=bad):
            arm_overlay(bad)
    with pytest.raises(ConfigError, match="seeds"):
        StudySpec(seeds=[0, 0]).validate()
    spec = StudySpec(arms=["grpo", "strength"], seeds=[3, 4])
    assert [r.name for r in plan(spec)] == ["grpo-s3", "strength-s3", "grpo-s4", "strength-s4"]


def test_arm_configs_share_everything_but_the_method(tmp_path):
    from skillduet_plugin.study import StudySpec, plan, run_config

    spec = StudySpec(overrides=["steps=4", "skillduet.use_global=true"], arms=["grpo", "local_only", "random"],
                     seeds=[7])
    base = spec.base_config()
    configs = {r.arm: run_config(spec, base, tmp_path, r, tmp_path / r.name) for r in plan(spec)}
    m = {a: c.method_config() for a, c in configs.items()}
    # the base's explicit use_global=true cannot turn the ablations back into the full method
    assert not m["grpo"].use_global and m["grpo"].opd_coef == 0 and not m["grpo"].extract_local
    assert not m["local_only"].use_global and m["local_only"].opd_coef > 0
    assert m["random"].selector == "random" and m["random"].use_global
    for c in configs.values():
        assert c.model == str(tmp_path) and not c.warm_start_enabled and not c.eval_before
        assert c.seed == 7 and c.steps == 4 and c.action_mode == base.action_mode
    plain = [{k: v for k, v in c.to_dict().items() if k not in ("skillduet", "name", "output_dir")}
             for c in configs.values()]
    assert plain[0] == plain[1] == plain[2]


def test_a_study_directory_refuses_other_base_settings(tmp_path):
    from skillduet_plugin.study import StudySpec, load_spec, open_study

    spec = StudySpec(overrides=["steps=4"], arms=["grpo"], seeds=[0])
    open_study(tmp_path, spec, spec.base_config())
    more = StudySpec(overrides=["steps=4"], arms=["grpo", "strength"], seeds=[0, 1])  # extending is fine
    open_study(tmp_path, more, more.base_config())
    assert load_spec(tmp_path) == more
    other = StudySpec(overrides=["steps=5"], arms=["grpo"], seeds=[0])
    with pytest.raises(ConfigError, match=r"other base settings \(steps differ\)"):
        open_study(tmp_path, other, other.base_config())


def test_an_interrupted_run_without_a_checkpoint_restarts_from_scratch(tmp_path, monkeypatch):
    from skillduet_plugin import study
    from skillduet_plugin.runs import trl_runner

    calls = []
    monkeypatch.setattr(trl_runner, "run_training", lambda config, log=None, resume=None: calls.append(resume))
    run = tmp_path / "strength-s0"
    (run / "checkpoints" / "checkpoint-1").mkdir(parents=True)  # torn: no trainer_state.json, no bank snapshot
    (run / "config.yaml").write_text("name: x\n")
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    assert study._train(None, run, lambda m: None) == "restarted"
    assert calls == [None] and not run.exists()  # the torn folder is gone before the fresh start
    assert study._train(None, tmp_path / "new", lambda m: None) == "fresh"


@pytest.mark.parametrize("version, expected", [((3, 10, 14, "final", 0), {}),
                                               ((3, 11, 0, "final", 0), {"max_tasks_per_child": 1}),
                                               ((3, 12, 3, "final", 0), {"max_tasks_per_child": 1})])
def test_study_pool_passes_max_tasks_per_child_only_where_python_has_it(monkeypatch, version, expected):
    import sys

    from skillduet_plugin import study
    monkeypatch.setattr(sys, "version_info", version)
    assert study._pool_kwargs() == expected


def test_a_setting_added_after_a_study_began_resumes_at_its_default(tmp_path):
    """A study.json written before a setting existed (here: micro_batch, and a skillduet.* key) still resumes when
    the setting is at its default, and names it (dotted) when it is not."""
    import json

    from skillduet_plugin.study import STUDY_FILE, StudySpec, open_study

    spec = StudySpec(overrides=["steps=4"], arms=["grpo"], seeds=[0])
    open_study(tmp_path, spec, spec.base_config())
    file = tmp_path / STUDY_FILE
    stored = json.loads(file.read_text())
    del stored["base"]["micro_batch"], stored["base"]["skillduet"]["opd_topk"]
    file.write_text(json.dumps(stored))
    open_study(tmp_path, spec, spec.base_config())  # both at their defaults: resumes
    assert "micro_batch" in json.loads(file.read_text())["base"]  # and the file now names them
    file.write_text(json.dumps(stored))
    changed = StudySpec(overrides=["steps=4", "micro_batch=8", "skillduet.opd_topk=4"], arms=["grpo"], seeds=[0])
    with pytest.raises(ConfigError, match=r"\(micro_batch, skillduet.opd_topk differ\)"):
        open_study(tmp_path, changed, changed.base_config())
