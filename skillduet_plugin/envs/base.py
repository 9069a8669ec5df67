"""The one contract every text environment follows (ALFWorld, WebShop, test doubles).

``reset(task_id) -> (obs, info)`` and ``step(action) -> (obs, reward, done, info)``; ``info`` always carries
``admissible_actions``, ``won``, ``score``, ``task_type`` (the scope) and ``task`` (the instruction).
"""

from __future__ import annotations

import abc
from typing import Any

REQUIRED_INFO_KEYS = ("admissible_actions", "won", "score", "task_type", "task")


class TextEnv(abc.ABC):
    """A multi-turn text environment over a fixed, ordered list of tasks."""

    #: registry name, e.g. "alfworld"
    name: str = ""
    #: hard step limit of one episode (ALFWorld 50, WebShop 15)
    max_steps: int = 50

    @property
    @abc.abstractmethod
    def tasks(self) -> list[str]:
        """Stable, ordered task ids of this split (the evaluation panel for validation splits)."""

    @abc.abstractmethod
    def reset(self, task_id: str) -> tuple[str, dict[str, Any]]:
        """Start the episode of ``task_id``; returns the first observation and info."""

    @abc.abstractmethod
    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        """Apply one text action; returns observation, reward, done, info."""

    def task_type(self, task_id: str) -> str:
        """The scope of a task without playing it (default: play-free lookup is not supported)."""
        raise NotImplementedError(f"{type(self).__name__} cannot tell a task's type without reset()")

    def close(self) -> None:
        """Release engine resources."""

    def __enter__(self) -> "TextEnv":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_info(info: dict[str, Any], where: str = "info") -> dict[str, Any]:
    """Raise if an env's info dict misses a contract key (helps third-party env authors)."""
    missing = [k for k in REQUIRED_INFO_KEYS if k not in info]
    if missing:
        raise KeyError(f"{where} is missing {', '.join(missing)}: every TextEnv info must carry "
                       f"{', '.join(REQUIRED_INFO_KEYS)}")
    return info
