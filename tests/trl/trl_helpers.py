"""Plain helpers shared by the TRL adapter tests (a uniquely named module: conftest is not importable by name
when several test folders have one)."""

from __future__ import annotations


def small_args(out_dir, **overrides):
    """A SkillDuetGRPOConfig for a seconds-long CPU run on the toy env (4 rollouts of one task per step)."""
    from skillduet_plugin.integrations.trl import CPU_SAFE_DEFAULTS, SkillDuetGRPOConfig

    values = {**CPU_SAFE_DEFAULTS, "output_dir": str(out_dir), "num_generations": 4, "per_device_train_batch_size": 4,
              "max_completion_length": 160, "max_steps": 2, "env_name": "toy", "max_turns": 2,
              "max_new_tokens_per_turn": 12, "save_strategy": "no", "seed": 0, "learning_rate": 1e-3,
              "disable_tqdm": True}
    values.update(overrides)
    return SkillDuetGRPOConfig(**values)


def group_rows(trainer, task_index=3, n=None):
    """One GRPO group of dataset rows, as the sampler would hand them to ``_generate_and_score_completions``."""
    n = n or trainer.args.num_generations
    row = dict(trainer.train_dataset[task_index])
    return [dict(row) for _ in range(n)]
