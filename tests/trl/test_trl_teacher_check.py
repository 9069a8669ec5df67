"""The per-step teacher check inside SkillDuetGRPOTrainer: logged each step, and never a change to what is trained
(its episodes are drawn from a forked, seeded generator), with the negative control that drawing them from the
training's own generator would change the run."""

from __future__ import annotations

import contextlib

import pytest
import torch


def _train(make_trainer, tmp_path, name, samples):
    trainer = make_trainer(out_dir=tmp_path / name, action_selection="choose", max_new_tokens_per_turn=32,
                           max_steps=2, teacher_check_samples=samples, skillduet={"use_global": False})
    trainer.train()
    weights = torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
    return weights, trainer.state.log_history


def test_teacher_check_is_logged_and_leaves_training_unchanged(make_trainer, tmp_path, monkeypatch):
    plain, plain_logs = _train(make_trainer, tmp_path, "plain", 0)
    checked, logs = _train(make_trainer, tmp_path, "checked", 2)
    steps = [r for r in logs if "teacher_check/success_with_local" in r]
    assert len(steps) == 2 and not any("teacher_check/success_with_local" in r for r in plain_logs)
    for r in steps:
        assert 0.0 <= r["teacher_check/success_with_local"] <= 1.0
        assert r["teacher_check/difference"] == pytest.approx(
            r["teacher_check/success_with_local"] - r["teacher_check/success_without_local"])
    assert torch.equal(plain, checked)  # bit for bit: the check's episodes are never trained on nor drawn ahead

    # negative control: the same check without the forked generator (its seed and draws then leak into the
    # training's generator) changes what is trained
    monkeypatch.setattr(torch.random, "fork_rng", lambda *a, **k: contextlib.nullcontext())
    unforked, _ = _train(make_trainer, tmp_path, "unforked", 2)
    assert not torch.equal(plain, unforked)


def test_teacher_check_samples_is_validated(tmp_path):
    from skillduet_plugin.config import ConfigError
    from trl_helpers import small_args

    with pytest.raises(ConfigError, match="teacher_check_samples=-1 is invalid"):
        small_args(tmp_path, teacher_check_samples=-1)
