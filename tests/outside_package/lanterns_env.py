"""``lanterns``: light the lantern the task names (found through the ``skillduet.envs`` entry point)."""

from __future__ import annotations

from typing import Any

from skillduet_plugin.envs.base import TextEnv
from skillduet_plugin.envs.registry import register_env

COLOURS = ("red", "blue", "green")


class LanternsEnv(TextEnv):
    """Three tasks, two turns: a wrong lantern costs a turn; the right one wins (reward 1) and ends the episode."""

    def __init__(self, split: str = "train") -> None:
        self.split = split
        self._colour, self._turn = "", 0

    @property
    def tasks(self) -> list[str]:
        return [f"lantern-{c}" for c in COLOURS]

    def _info(self, won: bool) -> dict[str, Any]:
        return {"admissible_actions": [f"light {c}" for c in COLOURS], "won": won, "score": float(won),
                "task_type": "lanterns", "task": f"light the {self._colour} lantern."}

    def reset(self, task_id: str) -> tuple[str, dict[str, Any]]:
        self._colour, self._turn = task_id.split("-", 1)[1], 0
        return "Three lanterns hang dark by the door.", self._info(False)

    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        self._turn += 1
        won = action == f"light {self._colour}"
        obs = "The lantern glows." if won else "That lantern stays dark."
        return obs, float(won), won or self._turn >= 2, self._info(won)


@register_env("lanterns", task_types=("lanterns",), extras={"colours": ", ".join(COLOURS)})
def make_lanterns(data_dir: str | None = None, split: str = "train", **kwargs: Any) -> LanternsEnv:
    return LanternsEnv(split)
