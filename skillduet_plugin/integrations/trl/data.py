"""The task dataset GRPOTrainer samples from, the sampler that keeps its order on resume, and the reward function
that reads the environment's reward.

GRPOTrainer's sampler hands out dataset rows ``num_generations`` at a time; here a row is a task (its id and
scope), and the rollout function plays the episodes. The ``prompt`` column is only a placeholder TRL requires:
the real prompt is built from the environment's first observation.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from datasets import Dataset
from trl.trainer.utils import RepeatSampler


def task_dataset(env: Any = None, task_ids: Sequence[str] | None = None, *, repeat: int = 1):
    """A ``datasets.Dataset`` with one row per task: ``prompt`` (placeholder messages), ``task_id``, ``scope``.

    Args:
        env: a ``TextEnv`` (``env.tasks`` lists the split's tasks; ``env.task_type`` gives the scope when the
            environment can tell it without playing); may be None when ``task_ids`` is given.
        task_ids: the tasks to train on (default: ``env.tasks``).
        repeat: each task appears this many times (small toy task lists with large batches).

    The scope column is informative (``"unknown"`` when the environment cannot tell it before ``reset``); the
    rollout uses the scope the environment reports at reset.
    """

    if task_ids is None:
        if env is None:
            raise ValueError("task_dataset needs env (to list env.tasks) or task_ids")
        task_ids = list(env.tasks)
    task_ids = [str(t) for t in task_ids]
    if not task_ids:
        raise ValueError("task_ids is empty: the dataset needs at least one task")
    if repeat < 1:
        raise ValueError(f"repeat={repeat!r} must be >= 1")
    scopes = []
    for tid in task_ids:
        try:
            scopes.append(str(env.task_type(tid)) if env is not None else "unknown")
        except (NotImplementedError, KeyError, AttributeError):
            scopes.append("unknown")
    rows = {"prompt": [], "task_id": [], "scope": []}
    for _ in range(repeat):
        for tid, scope in zip(task_ids, scopes):
            rows["prompt"].append([{"role": "user", "content": f"task {tid}"}])
            rows["task_id"].append(tid)
            rows["scope"].append(scope)
    return Dataset.from_dict(rows)


def make_env_reward(invalid_action_penalty: float, reward_scale: float):
    """A TRL reward function: ``reward_scale * env_reward - invalid_action_penalty * invalid_actions``.

    ``env_reward`` and ``invalid_actions`` are extra fields the SkillDuet rollout returns for every completion.
    """
    if invalid_action_penalty < 0:
        raise ValueError(f"invalid_action_penalty={invalid_action_penalty!r} must be >= 0")

    def env_reward(prompts: list, completions: list, env_reward: list[float] | None = None,
                   invalid_actions: list[int] | None = None, **kwargs: Any) -> list[float]:
        if env_reward is None or invalid_actions is None:
            raise KeyError("env_reward needs the 'env_reward' and 'invalid_actions' fields of the SkillDuet rollout; "
                           "use it with SkillDuetGRPOTrainer")
        return [reward_scale * float(r) - invalid_action_penalty * int(n) for r, n in zip(env_reward, invalid_actions)]

    return env_reward


class ResumableRepeatSampler(RepeatSampler):
    """TRL's ``RepeatSampler`` whose shuffle of epoch ``e`` is the ``e``-th draw of its seeded generator however
    epoch ``e`` is reached.

    TRL's sampler draws one permutation each time it is iterated, from a generator seeded once, so epoch ``e``
    gets the ``e``-th draw only when the epochs before it ran in this process. The transformers Trainer resumes
    a checkpoint of a later epoch without iterating the earlier ones, so a resumed run trained on another epoch's
    task order than the uninterrupted run from the first step after the checkpoint. Here ``set_epoch`` (called
    by the Trainer, through accelerate's loaders, before each epoch) names the epoch, and an iteration that is
    not the next draw replays the generator from its seed to it: an uninterrupted run draws exactly TRL's
    sequence (the generator is never reset), a resumed one the same permutations.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.epoch: int | None = None  # None until set_epoch: iterate as TRL does
        self.draws = 0  # permutations drawn from the generator since its seed

    @classmethod
    def of(cls, sampler: RepeatSampler) -> "ResumableRepeatSampler":
        """``sampler`` (built by TRL from the trainer's settings) made resumable: the same attributes, nothing drawn."""
        resumable = cls.__new__(cls)
        resumable.__dict__.update(sampler.__dict__, epoch=None, draws=0)
        return resumable

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        if self.shuffle and self.seed is not None and self.epoch is not None and self.epoch != self.draws:
            self.generator.manual_seed(self.seed)
            for _ in range(self.epoch):
                torch.randperm(self.num_samples, generator=self.generator)
            self.draws = self.epoch
        self.draws += 1
        return super().__iter__()
