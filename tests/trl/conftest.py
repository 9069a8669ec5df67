"""Fixtures for the TRL adapter tests: the toy environment and a small SkillDuetGRPOTrainer factory."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

from skillduet_plugin.envs import ENV_REGISTRY, register_env  # noqa: E402
from trl_helpers import small_args  # noqa: E402

TOY_TARGET = "skillduet_plugin.rollout.toy:make_toy"


@pytest.fixture(autouse=True)
def toy_env_registered():
    previous = ENV_REGISTRY.get("toy")
    register_env("toy", TOY_TARGET)
    yield
    if previous is None:
        ENV_REGISTRY.pop("toy", None)
    else:
        ENV_REGISTRY["toy"] = previous


@pytest.fixture()
def make_trainer(tmp_path, tiny_model_dir):
    """``make_trainer(**config_overrides, trainer_kwargs={...})`` -> a SkillDuetGRPOTrainer on the tiny model."""
    from skillduet_plugin.integrations.trl import SkillDuetGRPOTrainer, task_dataset
    from skillduet_plugin.rollout.toy import ToyEnv, toy_rollout_kwargs

    def make(out_dir=None, trainer_kwargs=None, **overrides):
        import torch

        torch.manual_seed(0)
        args = small_args(out_dir or tmp_path / "run", **overrides)
        kwargs = {"train_dataset": task_dataset(ToyEnv()), "rollout_kwargs": toy_rollout_kwargs()}
        kwargs.update(trainer_kwargs or {})
        return SkillDuetGRPOTrainer(model=str(tiny_model_dir), args=args, **kwargs)

    return make
