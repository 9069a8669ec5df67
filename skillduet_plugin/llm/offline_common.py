"""Trajectory parsing and environment-agnostic analysis shared by the offline analyzer's rules.

A trajectory payload is ``{"traj_id", "task", "actions", "observations", "won", "reward"}``. Observations are
one per action (``observations[i]`` answers ``actions[i]``) or one more, the first being the initial
observation; a missing last observation reads as empty. Raw environment text is best; an observation wrapped
in a prompt turn is unwrapped.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from skillduet_plugin.core.registry import Registry
from skillduet_plugin.envs.registry import load_environments
from skillduet_plugin.llm.base import PermanentError

NOTHING_HAPPENS = "Nothing happens."
#: The start of a Local skill's line that holds for one game only (where this game's objects are, named exactly
#: as its actions name them): the offline synthesizer drops such lines, so a Global stays class-level.
GAME_LINE_PREFIX = "In this game:"


@dataclass(frozen=True)
class Step:
    """One action and the observation it produced."""

    index: int
    action: str
    observation: str

    @property
    def invalid(self) -> bool:
        return self.observation.strip() == NOTHING_HAPPENS


@dataclass(frozen=True)
class Traj:
    traj_id: str
    task: str
    steps: tuple[Step, ...]
    won: bool
    reward: float
    initial_observation: str = ""

    @property
    def actions(self) -> list[str]:
        return [s.action for s in self.steps]


def parse_traj(data: Any, where: str) -> Traj:
    """Validate a trajectory payload; a malformed one is a :class:`PermanentError` naming the field."""
    if not isinstance(data, dict):
        raise PermanentError(f"payload[{where!r}] must be a trajectory mapping, got {type(data).__name__}")
    actions, observations = data.get("actions"), data.get("observations")
    if not isinstance(actions, (list, tuple)) or not all(isinstance(a, str) for a in actions):
        raise PermanentError(f"payload[{where!r}]['actions'] must be a list of strings")
    if not isinstance(observations, (list, tuple)) or not all(isinstance(o, str) for o in observations):
        raise PermanentError(f"payload[{where!r}]['observations'] must be a list of strings")
    initial = ""
    observations = [raw_observation(o) for o in observations]
    if len(observations) > len(actions):
        initial, observations = observations[0], observations[1:len(actions) + 1]
    # A chat-derived view may lack the last observation (the episode ended on that action).
    observations = observations + [""] * (len(actions) - len(observations))
    steps = tuple(Step(i, a.strip(), o.strip()) for i, (a, o) in enumerate(zip(actions, observations)))
    try:
        reward = float(data.get("reward", 0.0) or 0.0)
    except (TypeError, ValueError):
        raise PermanentError(f"payload[{where!r}]['reward'] must be a number") from None
    return Traj(traj_id=str(data.get("traj_id", "")), task=str(data.get("task", "")), steps=steps,
                won=bool(data.get("won", False)), reward=reward, initial_observation=initial.strip())


_TEMPLATED_OBS = re.compile(r"current observation is:\s*(.*?)\s*(?:\n\s*Your admissible actions|$)",
                            re.DOTALL | re.IGNORECASE)


def raw_observation(text: str) -> str:
    """The environment's own text when an observation comes wrapped in a prompt turn (verl-agent style
    "... your current observation is: X\nYour admissible actions ...")."""
    m = _TEMPLATED_OBS.search(text)
    return m.group(1) if m else text


def strip_instance(name: str) -> str:
    """``"knife 1"`` -> ``"knife"``: instance numbers do not carry over to another game."""
    return re.sub(r"\s+\d+\b", "", name).strip()


def quote(text: str) -> str:
    return f"'{text}'"


def join_list(items: Sequence[str], limit: int = 4, conj: str = "and") -> str:
    """``a, b and c`` (at most ``limit`` items, then ``...``)."""
    items = list(dict.fromkeys(i for i in items if i))
    if len(items) > limit:
        items = items[:limit] + ["..."]
        return ", ".join(items)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + f" {conj} " + items[-1]


def first_divergence(a: Sequence[str], b: Sequence[str]) -> int | None:
    """Index of the first position where two action sequences differ (None when identical)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


@dataclass(frozen=True)
class Loop:
    """A repeated cycle: ``cycle`` (actions) ran ``repeats`` times in a row starting at ``start``."""

    cycle: tuple[str, ...]
    repeats: int
    start: int


def find_loop(steps: Sequence[Step], max_period: int = 4, min_repeats: int = 3) -> Loop | None:
    """The longest run of an identical (action, observation) cycle repeated back to back.

    A period-1 cycle must repeat ``min_repeats`` times; longer cycles twice (they already waste more steps).
    """
    pairs = [(s.action, s.observation) for s in steps]
    best: Loop | None = None
    best_waste = 0
    for period in range(1, max_period + 1):
        need = min_repeats if period == 1 else 2
        start = 0
        while start + period * need <= len(pairs):
            block = pairs[start:start + period]
            repeats = 1
            while pairs[start + repeats * period:start + (repeats + 1) * period] == block:
                repeats += 1
            if repeats >= need and len({a for a, _ in block}) == period:
                waste = (repeats - 1) * period
                if waste > best_waste:
                    best, best_waste = Loop(tuple(a for a, _ in block), repeats, start), waste
                start += repeats * period
            else:
                start += 1
    return best


def as_bullets(lines: Sequence[str]) -> str:
    """The analyzer response format: ``<skill>`` with one ``- `` bullet per line."""
    body = "\n".join(f"- {line.strip()}" for line in lines if line and line.strip())
    return f"<skill>\n{body}\n</skill>"


@dataclass(frozen=True)
class OfflineRules:
    """One environment's offline analyzer rules (registered with :func:`register_offline_rules`): its task
    parser and the three Local-skill writers, each returning bullet lines."""

    parse_task: Callable[[str, str], Any]  # (instruction, scope) -> the rules' own task object
    pair: Callable[[Any, Traj, Traj], list[str]]  # (task, success, failure)
    local_procedure: Callable[[Any, Traj], list[str]]  # (task, success)
    correction: Callable[[Any, Traj], list[str]]  # (task, failure)


#: The modules whose import registers the built-in environments' rules (imported on the first lookup).
BUILTIN_RULE_MODULES = ("offline_alfworld", "offline_webshop")


def _discover_rules() -> None:
    for module in BUILTIN_RULE_MODULES:
        importlib.import_module(f"skillduet_plugin.llm.{module}")
    load_environments()  # an installed environment's module registers its rules when loaded


#: Environment name -> its offline analyzer rules. The rules belong to this layer, so they are registered here
#: against the environment's name (an environment never names an llm/ module); an environment without rules
#: gets the generic ones.
OFFLINE_RULES: Registry[OfflineRules] = Registry("env", "offline analyzer rules", discover=_discover_rules)


def register_offline_rules(env: str, rules: OfflineRules, *, replace: bool = False) -> OfflineRules:
    """Register the offline analyzer's rules of the environment ``env`` (at the end of the rules' module)."""
    return OFFLINE_RULES.register(env, rules, replace=replace)
