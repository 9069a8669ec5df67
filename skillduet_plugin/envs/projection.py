"""Turns a policy response into one environment action: the text of the last ``<action>...</action>``.

A response is *valid* when it has both a ``<think>...</think>`` block and an ``<action>...</action>`` block,
contains no CJK characters and (ALFWorld, when the list is given) names an admissible action. An invalid
response is still sent to the environment (its tagged action, else the text's last 30 characters), which
answers ``Nothing happens.`` (ALFWorld) or leaves the page unchanged (WebShop); the trainer adds ``-coef`` to
the reward of each invalid step (``INVALID_ACTION_PENALTY_COEF`` = 0.1, as verl-agent's
``invalid_action_penalty_coef``).
"""

from __future__ import annotations

import re
from typing import Sequence

from skillduet_plugin.envs.registry import env_spec

INVALID_ACTION_PENALTY_COEF = 0.1
INVALID_TAIL_CHARS = 30

_ACTION_RE = re.compile(r"<action>(.*?)</action>", re.DOTALL)
_THINK_RE = re.compile(r"<think>.*?</think>", re.DOTALL)
_CJK_RE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


def contains_cjk(text: str) -> bool:
    """True if ``text`` has Chinese, Japanese or Korean characters (a common small-model failure mode)."""
    return bool(_CJK_RE.search(text))


def project_action(env_name: str, text: str, admissible_actions: Sequence[str] | None = None, *,
                   require_think: bool = True, require_admissible: bool | None = None) -> tuple[str, bool]:
    """``(action, valid)`` for one response (an environment may register its own parser instead).

    ``require_admissible`` defaults to True unless the environment registers ``free_text_actions`` (WebShop's
    ``search[...]`` takes free text); it only applies when ``admissible_actions`` is given.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be the decoded response str, got {type(text).__name__}")
    spec = env_spec(env_name)
    if spec.actions.project_action is not None:
        return spec.actions.project_action(env_name, text, admissible_actions)
    if require_admissible is None:
        require_admissible = not spec.actions.free_text_actions
    lowered = text.lower()
    actions = _ACTION_RE.findall(lowered)
    if not actions:
        return lowered[-INVALID_TAIL_CHARS:].strip(), False
    action = actions[-1].strip()
    valid = bool(action) and not contains_cjk(text)
    if require_think and not _THINK_RE.search(lowered):
        valid = False
    if valid and require_admissible and admissible_actions is not None:
        valid = action in admissible_actions
    if not valid:
        # As verl-agent: a tagged action is still sent (the env answers it, typically "Nothing happens."), only
        # flagged; an empty tag falls back to the text's tail.
        return (action or lowered[-INVALID_TAIL_CHARS:].strip()), False
    return action, True


def project_actions(env_name: str, texts: Sequence[str], admissible: Sequence[Sequence[str] | None] | None = None,
                    **kwargs: object) -> tuple[list[str], list[bool]]:
    """Batched ``project_action``: ``(actions, valid_flags)`` in input order."""
    if admissible is not None and len(admissible) != len(texts):
        raise ValueError(f"admissible has {len(admissible)} lists for {len(texts)} texts")
    pairs = [project_action(env_name, t, admissible[i] if admissible is not None else None, **kwargs)
             for i, t in enumerate(texts)]
    return [a for a, _ in pairs], [v for _, v in pairs]


def episode_penalty(valid_flags: Sequence[bool], coef: float = INVALID_ACTION_PENALTY_COEF) -> float:
    """The (non-positive) invalid-action penalty of one episode: ``-coef`` per invalid step."""
    if coef < 0:
        raise ValueError(f"coef={coef} must be >= 0 (the penalty is subtracted)")
    return -coef * sum(1 for v in valid_flags if not v)


__all__ = ["INVALID_ACTION_PENALTY_COEF", "contains_cjk", "episode_penalty", "project_action", "project_actions"]
