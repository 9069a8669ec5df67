"""``ToyPool``: an in-process stand-in for ``envs.pool.EnvPool`` over the toy environment, for unit tests
(``fail_tasks`` report a worker error, ``reset_calls`` records what was reset)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from skillduet_plugin.envs.toy import ToyEnv


@dataclass
class ToyStepResult:
    """Same fields as ``envs.pool.StepResult``."""

    obs: str
    reward: float = 0.0
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


class ToyPool:
    """In-process stand-in for ``EnvPool``: one env per episode; ``fail_tasks`` report a worker error."""

    def __init__(self, max_steps: int = 3, fail_tasks: Sequence[str] = ()) -> None:
        self.max_steps = max_steps
        self.fail_tasks = set(fail_tasks)
        self.envs: list[ToyEnv] = []
        self.reset_calls: list[list[str]] = []

    def reset(self, task_ids: Sequence[str]) -> list[ToyStepResult]:
        self.reset_calls.append(list(task_ids))
        self.envs = [ToyEnv(self.max_steps) for _ in task_ids]
        out = []
        for env, tid in zip(self.envs, task_ids):
            if tid in self.fail_tasks:
                out.append(ToyStepResult(obs="", done=True, info={}, error="worker crashed"))
                continue
            obs, info = env.reset(tid)
            out.append(ToyStepResult(obs=obs, info=info))
        return out

    def step(self, episode_ids: Sequence[int], actions: Sequence[str]) -> list[ToyStepResult]:
        out = []
        for i, action in zip(episode_ids, actions):
            obs, reward, done, info = self.envs[i].step(action)
            out.append(ToyStepResult(obs=obs, reward=reward, done=done, info=info))
        return out

    def close(self) -> None:
        self.envs = []
