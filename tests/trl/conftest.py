"""Fixtures for the TRL adapter tests: the toy environment and a small SkillDuetGRPOTrainer factory."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

from skillduet_plugin.envs import ENV_REGISTRY, register_env  # noqa: E402

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


def small_args(out_dir, **overrides):
    """A SkillDuetGRPOConfig for a seconds-long CPU run on the toy env (4 rollouts of one task per step)."""
    from skillduet_plugin.integrations.trl import CPU_SAFE_DEFAULTS, SkillDuetGRPOConfig

    values = {**CPU_SAFE_DEFAULTS, "output_dir": str(out_dir), "num_generations": 4, "per_device_train_batch_size": 4,
              "max_completion_length": 160, "max_steps": 2, "env_name": "toy", "max_turns": 2,
              "max_new_tokens_per_turn": 12, "save_strategy": "no", "seed": 0, "learning_rate": 1e-3,
              "disable_tqdm": True}
    values.update(overrides)
    return SkillDuetGRPOConfig(**values)


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


def group_rows(trainer, task_index=3, n=None):
    """One GRPO group of dataset rows, as the sampler would hand them to ``_generate_and_score_completions``."""
    n = n or trainer.args.num_generations
    row = dict(trainer.train_dataset[task_index])
    return [dict(row) for _ in range(n)]
