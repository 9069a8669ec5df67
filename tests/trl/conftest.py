"""Fixtures for the TRL adapter tests: a small SkillDuetGRPOTrainer factory on the (registered) toy env."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

from trl_helpers import small_args  # noqa: E402


@pytest.fixture()
def make_trainer(tmp_path, tiny_model_dir):
    """``make_trainer(**config_overrides, trainer_kwargs={...})`` -> a SkillDuetGRPOTrainer on the tiny model."""
    from skillduet_plugin.integrations.trl import SkillDuetGRPOTrainer, task_dataset
    from skillduet_plugin.envs.toy import ToyEnv

    def make(out_dir=None, trainer_kwargs=None, **overrides):
        import torch

        torch.manual_seed(0)
        args = small_args(out_dir or tmp_path / "run", **overrides)
        kwargs = {"train_dataset": task_dataset(ToyEnv())}
        kwargs.update(trainer_kwargs or {})
        return SkillDuetGRPOTrainer(model=str(tiny_model_dir), args=args, **kwargs)

    return make
