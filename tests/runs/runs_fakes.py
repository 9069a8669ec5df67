"""A small ALFWorld-shaped text env with walkthroughs and an in-process pool, for the runs tests.

Observations and actions look like ALFWorld's, so the real ``envs.prompts`` / ``envs.projection`` for
``alfworld`` apply; a task is won by issuing its walkthrough in order.
"""

from __future__ import annotations

from typing import Any, Sequence

from skillduet_plugin.envs.base import TextEnv
from skillduet_plugin.envs.pool import StepResult

# task id -> (task type, instruction, walkthrough)
FAKE_TASKS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "pick_and_place_simple-Apple-None-Fridge-1/trial_1": (
        "pick", "put an apple in fridge.", ("go to countertop 1", "take apple 1 from countertop 1",
                                            "go to fridge 1", "move apple 1 to fridge 1")),
    "look_at_obj_in_light-Book-None-DeskLamp-2/trial_1": (
        "look", "look at book under the desklamp.", ("go to desk 1", "take book 1 from desk 1",
                                                     "use desklamp 1")),
    "pick_and_place_simple-Mug-None-Shelf-3/trial_1": (
        "pick", "put a mug in shelf.", ("go to desk 1", "take mug 1 from desk 1", "go to shelf 1",
                                        "move mug 1 to shelf 1")),
    "look_at_obj_in_light-Pen-None-DeskLamp-4/trial_1": (
        "look", "look at pen under the desklamp.", ("go to shelf 1", "take pen 1 from shelf 1",
                                                    "go to desk 1", "use desklamp 1")),
}
_PLACES = ("countertop 1", "desk 1", "fridge 1", "shelf 1")


class FakeAlfworld(TextEnv):
    name = "alfworld"
    max_steps = 10

    def __init__(self, tasks: Sequence[str] | None = None) -> None:
        self._tasks = list(tasks) if tasks is not None else list(FAKE_TASKS)
        self._task: str | None = None
        self._progress = 0
        self._steps = 0

    @property
    def tasks(self) -> list[str]:
        return list(self._tasks)

    def task_type(self, task_id: str) -> str:
        return FAKE_TASKS[task_id][0]

    def walkthrough(self, task_id: str) -> list[str]:
        return list(FAKE_TASKS[task_id][2])

    def _admissible(self) -> list[str]:
        wt = FAKE_TASKS[self._task][2]  # type: ignore[index]
        nxt = [wt[self._progress]] if self._progress < len(wt) else []
        return sorted(set([f"go to {p}" for p in _PLACES] + ["inventory", "look"] + nxt))

    def _info(self, won: bool) -> dict[str, Any]:
        scope, task, _ = FAKE_TASKS[self._task]  # type: ignore[index]
        return {"admissible_actions": self._admissible(), "won": won, "score": float(won), "task_type": scope,
                "task": task}

    def reset(self, task_id: str) -> tuple[str, dict[str, Any]]:
        self._task, self._progress, self._steps = task_id, 0, 0
        task = FAKE_TASKS[task_id][1]
        obs = (f"-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly around "
               f"you, you see a countertop 1, a desk 1, a fridge 1, and a shelf 1.\n\nYour task is to: {task}")
        return obs, self._info(False)

    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        wt = FAKE_TASKS[self._task][2]  # type: ignore[index]
        self._steps += 1
        if self._progress < len(wt) and action == wt[self._progress]:
            self._progress += 1
            obs = f"You did: {action}."
        elif action.startswith("go to "):
            obs = f"You arrive at {action[6:]}. Nothing is here."
        else:
            obs = "Nothing happens."
        won = self._progress == len(wt)
        done = won or self._steps >= self.max_steps
        return obs, float(won), done, self._info(won)


class FakePool:
    """``EnvPool``'s reset/step surface over in-process fake envs (one env per episode)."""

    def __init__(self) -> None:
        self.envs: list[FakeAlfworld] = []

    def reset(self, task_ids: Sequence[str]) -> list[StepResult]:
        self.envs = [FakeAlfworld() for _ in task_ids]
        return [StepResult(*env.reset(t)[:1], 0.0, False, env.reset(t)[1]) for env, t in zip(self.envs, task_ids)]

    def step(self, episode_ids: Sequence[int], actions: Sequence[str]) -> list[StepResult]:
        return [StepResult(*self.envs[e].step(a)) for e, a in zip(episode_ids, actions)]

    def close(self) -> None:
        self.envs = []
