"""``toy``: a tiny deterministic text environment (six tasks, seconds-long runs) for smoke runs and tests.

``ToyEnv`` follows the ``TextEnv`` contract over six tasks of two scopes ("open" and "fetch"); an episode is
won by issuing the task's goal actions in order. It registers its own short prompts and action parser, so it
also shows an environment that does not use the standard prompt builder.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from skillduet_plugin.envs.base import TextEnv
from skillduet_plugin.envs.registry import register_env

TOY_ENV_NAME = "toy"

# task id -> (scope, instruction, goal actions in order)
TOY_TASKS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "toy-0": ("open", "open the box.", ("open box",)),
    "toy-1": ("open", "open the drawer.", ("open drawer",)),
    "toy-2": ("open", "open the fridge.", ("open fridge",)),
    "toy-3": ("fetch", "take the key from the box.", ("open box", "take key")),
    "toy-4": ("fetch", "take the apple from the fridge.", ("open fridge", "take apple")),
    "toy-5": ("fetch", "take the pen from the drawer.", ("open drawer", "take pen")),
}
ALL_ACTIONS = ("look", "open box", "open drawer", "open fridge", "take key", "take apple", "take pen")


class ToyEnv(TextEnv):
    """Six one- or two-step tasks; reward 1.0 and done on success, done after ``max_steps`` otherwise."""

    name = TOY_ENV_NAME

    def __init__(self, max_steps: int = 3, tasks: Sequence[str] | None = None) -> None:
        self.max_steps = max_steps
        self._tasks = list(tasks) if tasks is not None else list(TOY_TASKS)
        unknown = [t for t in self._tasks if t not in TOY_TASKS]
        if unknown:
            raise KeyError(f"tasks={unknown!r} are unknown toy tasks: allowed are {', '.join(TOY_TASKS)}")
        self._task: str | None = None
        self._progress = 0
        self._steps = 0

    @property
    def tasks(self) -> list[str]:
        return list(self._tasks)

    def task_type(self, task_id: str) -> str:
        return TOY_TASKS[task_id][0]

    def _info(self, won: bool) -> dict[str, Any]:
        scope, task, _ = TOY_TASKS[self._task]  # type: ignore[index]
        return {"admissible_actions": list(ALL_ACTIONS), "won": won, "score": 1.0 if won else 0.0,
                "task_type": scope, "task": task}

    def reset(self, task_id: str) -> tuple[str, dict[str, Any]]:
        if task_id not in TOY_TASKS:
            raise KeyError(f"task_id={task_id!r} is not a toy task")
        self._task, self._progress, self._steps = task_id, 0, 0
        return "You are in a room with a box, a drawer and a fridge.", self._info(False)

    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        if self._task is None:
            raise RuntimeError("call reset() before step()")
        goal = TOY_TASKS[self._task][2]
        self._steps += 1
        if action == goal[self._progress]:
            self._progress += 1
            obs = f"You {action}."
        else:
            obs = "Nothing happens."
        won = self._progress == len(goal)
        done = won or self._steps >= self.max_steps
        return obs, 1.0 if won else 0.0, done, self._info(won)


def toy_initial_messages(env_name: str, *, task: str, observation: str, admissible_actions: Sequence[str],
                         system_prompt: str | None = None) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    messages.append({"role": "user", "content": (
        f"Your task is to: {task}\nYour current observation is: {observation}\n"
        f"Your admissible actions of the current situation are: {', '.join(admissible_actions)}.\n"
        "Present the chosen action within <action> </action> tags.")})
    return messages


def toy_turn_message(env_name: str, *, observation: str, admissible_actions: Sequence[str], step: int) -> str:
    return (f"You are now at step {step}. Your current observation is: {observation}\n"
            f"Your admissible actions of the current situation are: {', '.join(admissible_actions)}.")


def toy_project_action(env_name: str, text: str,
                       admissible_actions: Sequence[str] | None = None) -> tuple[str, bool]:
    """The text inside the last ``<action>...</action>``; valid if it is admissible."""
    found = re.findall(r"<action>(.*?)</action>", text, flags=re.S)
    if not found:
        return text.strip()[-80:], False
    action = found[-1].strip().lower()
    return action, admissible_actions is None or action in admissible_actions


@register_env(TOY_ENV_NAME, initial_messages=toy_initial_messages, turn_message=toy_turn_message,
              project_action=toy_project_action, default_panel="train",
              task_types=tuple(sorted({scope for scope, _, _ in TOY_TASKS.values()})),
              description="a tiny deterministic text environment (six tasks, seconds-long runs) for smoke runs "
                          "and tests")
def make_toy(data_dir: str | None = None, split: str = "train", **kwargs: Any) -> ToyEnv:
    """The ``envs.make("toy", ...)`` factory: every split holds the same six tasks."""
    return ToyEnv(**kwargs)
