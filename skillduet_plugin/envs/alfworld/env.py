"""ALFWorld behind the ``TextEnv`` contract: the real TextWorld engine over game files in the official layout.

Reward is 1.0 on the step that wins the game and 0.0 otherwise (trainers scale it, e.g. verl-agent uses 10x);
an episode ends when the game is won or after ``max_steps`` actions (50, as in ALFWorld's evaluation).
Observations are the engine's text, unchanged.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from skillduet_plugin.envs.alfworld import expert, prompts
from skillduet_plugin.envs.alfworld.engine import EngineSession, user_alfworld_data
from skillduet_plugin.envs.alfworld.expert import searching_expert
from skillduet_plugin.envs.alfworld.generator import ensure_default_data, generator_identity
from skillduet_plugin.envs.alfworld.tasks import (GAME_FILE, SCOPES, discover_tasks, resolve_layout_root, select_tasks,
                                                  task_type_of)
from skillduet_plugin.envs.base import TextEnv
from skillduet_plugin.envs.registry import register_env

TASK_PREFIX = "Your task is to: "


def extract_task(observation: str) -> str:
    """The instruction after ``Your task is to: `` in an initial observation (``""`` if absent)."""
    _, found, rest = observation.partition(TASK_PREFIX)
    return rest.strip() if found else ""


class AlfworldEnv(TextEnv):
    """One ALFWorld player: ``reset(task_id)`` loads that game into the engine, ``step`` sends one command."""

    name = "alfworld"

    def __init__(self, layout_root: str | os.PathLike, split: str, tasks: list[str], *, max_steps: int = 50) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps={max_steps} must be >= 1 (ALFWorld's evaluation uses 50)")
        self.layout_root = Path(layout_root)
        self.split = split
        self.max_steps = int(max_steps)
        self._tasks = list(tasks)
        self._engine: EngineSession | None = None
        self._task_id: str | None = None
        self._task = ""
        self._step = 0
        self._done = True
        self._last_obs = ""
        self._last_info: dict[str, Any] = {}

    # -- task catalogue -------------------------------------------------------------------------------------
    @property
    def tasks(self) -> list[str]:
        return list(self._tasks)

    def task_type(self, task_id: str) -> str:
        return task_type_of(task_id)

    def game_file(self, task_id: str) -> Path:
        """Path of the ``game.tw-pddl`` of ``task_id`` (raises if it does not exist)."""
        if not isinstance(task_id, str) or not task_id:
            raise TypeError(f"task_id must be a non-empty str such as {self._tasks[:1]}, got {task_id!r}")
        path = self.layout_root / task_id / GAME_FILE
        if not path.is_file():
            raise KeyError(f"task_id={task_id!r} has no {GAME_FILE} under {self.layout_root}; "
                           f"use one of env.tasks ({len(self._tasks)} tasks in split {self.split!r})")
        return path

    def walkthrough(self, task_id: str) -> list[str]:
        """The expert command sequence stored in the game file (empty when the file carries none)."""
        with open(self.game_file(task_id)) as f:
            return list(json.load(f).get("walkthrough") or [])

    def searching_expert(self, task_id: str, seed: int = 0, first: tuple[str, ...] = (), hint: Any = None):
        """A fresh searching expert (``envs.alfworld.expert``) for one episode of ``task_id`` (the receptacles a
        skill's ``hint`` names visited first, then the receptacle classes ``first``), or None for task variants
        it does not play (sliced objects, movable receptacles): use :meth:`walkthrough` then."""

        return searching_expert(task_id, seed, first, hint)

    # -- episode --------------------------------------------------------------------------------------------
    def reset(self, task_id: str) -> tuple[str, dict[str, Any]]:
        gamefile = str(self.game_file(task_id))
        if self._engine is None:
            self._engine = EngineSession()
        state = self._engine.reset(gamefile)
        self._task_id, self._step, self._done = task_id, 0, False
        self._last_obs = state.feedback
        self._task = extract_task(self._last_obs)
        self._last_info = self._info(state, won=bool(state["won"]), action_admissible=True)
        return self._last_obs, dict(self._last_info)

    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        if self._task_id is None or self._engine is None:
            raise RuntimeError("step() before reset(): call env.reset(task_id) first")
        if not isinstance(action, str):
            raise TypeError(f"action must be a str command such as 'go to desk 1', got {type(action).__name__}")
        if self._done:
            # Like TextWorld after the end: nothing changes and nothing more is earned.
            return self._last_obs, 0.0, True, dict(self._last_info)
        admissible = action.strip() in self._last_info["admissible_actions"]
        state, _score, _done = self._engine.step(action)
        self._step += 1
        won = bool(state["won"])
        self._done = won or self._step >= self.max_steps
        self._last_obs = state.feedback
        self._last_info = self._info(state, won=won, action_admissible=admissible)
        return self._last_obs, 1.0 if won else 0.0, self._done, dict(self._last_info)

    def _info(self, state: Any, *, won: bool, action_admissible: bool) -> dict[str, Any]:
        return {
            "admissible_actions": list(state["admissible_commands"]),
            "won": won,
            "score": 1.0 if won else 0.0,
            "task_type": task_type_of(self._task_id),
            "task": self._task,
            "task_id": self._task_id,
            "step": self._step,
            "max_steps": self.max_steps,
            "gamefile": state.get("extra.gamefile") or str(self.layout_root / self._task_id / GAME_FILE),
            "action_admissible": action_admissible,
        }

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None
        self._task_id, self._done = None, True


def default_data_identity() -> dict[str, Any]:
    """What ``data_dir=None`` loads, for cache keys: ``$ALFWORLD_DATA``, or the generated games (the generator's
    code and engine versions)."""
    user = user_alfworld_data()
    if user is not None:
        return {"data_dir": str(user)}

    return {"generated": generator_identity()}


@register_env("alfworld", prompts=prompts.TEMPLATES, format_observation=prompts.format_observation,
              make_expert=expert.make_expert,
              default_data_identity=default_data_identity,
              default_panel="valid_unseen", limit_keyword="max_tasks", scope_order=SCOPES, task_types=SCOPES,
              description="ALFWorld household tasks on the real TextWorld engine (official games, or games we "
                          "generate)")
def make_alfworld(data_dir: str | os.PathLike | None = None, split: str = "train", *, max_steps: int = 50,
                  tasks: list[str] | None = None, max_tasks: int | None = None,
                  task_types: list[str] | None = None, **unused: Any) -> AlfworldEnv:
    """Build the ALFWorld env of ``split`` from ``data_dir`` (else ``$ALFWORLD_DATA``, else generated data).

    ``tasks`` keeps an explicit subset (in the given order), ``task_types`` keeps some scopes
    (``pick``/``look``/``clean``/``heat``/``cool``/``pick2``), ``max_tasks`` keeps the first N.
    """
    if unused:
        raise TypeError(f"make_alfworld got unknown keyword(s) {', '.join(sorted(unused))}: "
                        "accepted are data_dir, split, max_steps, tasks, max_tasks, task_types")
    if data_dir is None and user_alfworld_data() is None:

        data_dir = ensure_default_data(split)
    elif data_dir is None:
        data_dir = user_alfworld_data()
    root = resolve_layout_root(data_dir)
    all_tasks = discover_tasks(root, split)
    chosen = select_tasks(all_tasks, subset=tasks, max_tasks=max_tasks, task_types=task_types)
    return AlfworldEnv(root, split, chosen, max_steps=max_steps)
