"""Test doubles for the EnvPool: a tiny counting env that can crash its process or hang on command."""

from __future__ import annotations

import os
import time

from skillduet_plugin.envs.base import TextEnv


class CrashyEnv(TextEnv):
    """``step("crash")`` kills the process, ``step("hang")`` sleeps for an hour, ``step("raise")`` raises;
    any other action counts; the episode is won at ``step("win")``."""

    name = "crashy"

    def __init__(self, n_tasks: int = 4, max_steps: int = 5) -> None:
        self._tasks = [f"t{i}" for i in range(n_tasks)]
        self.max_steps = max_steps
        self._task = None
        self._n = 0

    @property
    def tasks(self) -> list[str]:
        return list(self._tasks)

    def _info(self, won: bool = False) -> dict:
        return {"admissible_actions": ["noop", "win"], "won": won, "score": float(won), "task_type": "fake",
                "task": f"do {self._task}", "task_id": self._task, "step": self._n, "pid": os.getpid()}

    def reset(self, task_id: str):
        if task_id == "crash_on_reset":
            os._exit(7)
        self._task, self._n = task_id, 0
        return f"start {task_id}", self._info()

    def step(self, action: str):
        if action == "crash":
            os._exit(3)
        if action == "hang":
            time.sleep(3600)
        if action == "raise":
            raise ValueError("boom")
        self._n += 1
        won = action == "win"
        return f"{self._task} step {self._n}: {action}", float(won), won or self._n >= self.max_steps, self._info(won)


def make_crashy(data_dir=None, split="train", **kw) -> CrashyEnv:
    return CrashyEnv(**kw)
