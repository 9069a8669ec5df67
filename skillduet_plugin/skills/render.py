"""Views of a trajectory for the analyzer: the structured payload ``T`` and a text rendering within a budget.

Adapters should put the per-turn environment actions and observations in ``Trajectory.metadata["actions"]``
and ``metadata["observations"]`` (lists of str, one per turn: the projected action, then the observation the
environment returned) and the environment name in ``metadata["env"]``. Without them the view is derived from
the chat: actions are the ``<action>...</action>`` content of each assistant turn (the whole turn when there is
no tag) and observations the user turns that follow each assistant turn.
"""

from __future__ import annotations

import re
from typing import Any

from skillduet_plugin.skills.budget import count_tokens_many
from skillduet_plugin.skills.types import Trajectory

_ACTION_TAG = re.compile(r"<action>(.*?)</action>", re.DOTALL | re.IGNORECASE)
ELISION_MARKER = "[... {n} middle turn(s) omitted ...]"
DEFAULT_RENDER_TOKENS = 3000
_MAX_TURN_CHARS = 2000  # one huge observation (a WebShop page) must not eat the whole budget


def _action_of(response: str) -> str:
    found = _ACTION_TAG.findall(response)
    return found[-1].strip() if found else response.strip()


def turns(traj: Trajectory) -> tuple[list[str], list[str]]:
    """``(actions, observations)`` per turn, from metadata when the adapter provided them."""
    meta = traj.metadata or {}
    actions = meta.get("actions")
    observations = meta.get("observations")
    if actions is None:
        responses = traj.responses or [m.get("content", "") for m in traj.messages if m.get("role") == "assistant"]
        actions = [_action_of(r) for r in responses]
    if observations is None:
        observations = []
        seen_assistant = False
        for m in traj.messages:
            if m.get("role") == "assistant":
                seen_assistant = True
            elif m.get("role") == "user" and seen_assistant:
                observations.append(m.get("content", ""))
    actions = [str(a) for a in actions]
    observations = [str(o) for o in observations]
    return actions, observations


def trajectory_payload(traj: Trajectory) -> dict[str, Any]:
    """The analyzer payload ``T`` shared with the offline backend."""
    actions, observations = turns(traj)
    return {"traj_id": traj.traj_id, "task": traj.task, "actions": actions, "observations": observations,
            "won": bool(traj.success), "reward": float(traj.reward)}


def _clip(text: str, limit: int = _MAX_TURN_CHARS) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return text[:half] + " [...] " + text[-half:]


def render_trajectory(traj: Trajectory, budget_tokens: int = DEFAULT_RENDER_TOKENS, tokenizer: Any = None) -> str:
    """Text of a trajectory for an analyzer prompt, within ``budget_tokens``.

    The initial observation (``metadata["initial_observation"]``), the outcome line and the final turns are
    always kept; when the turns do not fit, turns are dropped from the middle (the first turn is kept while it
    fits) and replaced by one elision marker.
    """
    actions, observations = turns(traj)
    n = max(len(actions), len(observations))
    lines = []
    for i in range(n):
        act = actions[i] if i < len(actions) else ""
        obs = observations[i] if i < len(observations) else ""
        lines.append(f"Step {i + 1}. Action: {_clip(act)}\nObservation: {_clip(obs)}")
    outcome = f"Outcome: {'success' if traj.success else 'failure'} (reward {traj.reward:g})"
    initial = str((traj.metadata or {}).get("initial_observation") or "")
    opening = [f"Initial observation: {_clip(initial)}"] if initial else []
    counts = count_tokens_many([outcome] + opening + lines, tokenizer)  # one tokenizer call per trajectory
    line_tokens = counts[1 + len(opening):]
    used = counts[0] + sum(c + 1 for c in counts[1:1 + len(opening)])
    total = used + sum(c + 1 for c in line_tokens)
    # Over budget: reserve room for the first turn (the agent's opening move) and the marker, when they fit
    # next to at least the last turn; then take turns from the end.
    reserve = 0
    if total > budget_tokens and n > 1:
        first_cost = line_tokens[0] + 1 + 8
        if used + first_cost + line_tokens[-1] + 1 <= budget_tokens:
            reserve = first_cost
    tail: list[str] = []
    for line, tokens in zip(reversed(lines), reversed(line_tokens)):
        cost = tokens + 1
        if tail and used + reserve + cost > budget_tokens:
            break
        tail.insert(0, line)
        used += cost
    first_idx = n - len(tail)
    head = [lines[0]] if first_idx > 0 and reserve else []
    omitted = first_idx - len(head)
    body = opening + head + ([ELISION_MARKER.format(n=omitted)] if omitted > 0 else []) + tail
    return "\n".join(body + [outcome])
