"""Deterministic rule-based analyzer and synthesizer for CPU runs and tests.

It reads only ``ChatRequest.payload`` (never the messages) and writes skills an LLM analyzer would: the
decisions that separate a success from a failure, a success's reusable procedure, a failure's correction, and
merged/compressed Globals. Payload kinds:

- ``{"kind": "local_pair", "env", "task", "scope", "success": T, "failure": T}`` -> ``<skill>...</skill>``
- ``{"kind": "local_procedure", "env", "task", "scope", "trajectory": T}`` (a success) -> ``<skill>``
- ``{"kind": "local_correction", "env", "task", "scope", "trajectory": T}`` (a failure) -> ``<skill>``
- ``{"kind": "synthesize", "scope", "current": [items], "new": [texts], "budget_tokens": int}`` -> ``<global>``
- ``{"kind": "compress", "scope", "items": [str], "target_items": int}`` -> ``<global>``

with ``T = {"traj_id", "task", "actions", "observations", "won", "reward"}`` (see
:mod:`skillduet_plugin.llm.offline_common`). An unknown kind or a malformed payload yields ``None`` and counts
as a failure, like any other backend fault.
"""

from __future__ import annotations

from typing import Any, Callable

from skillduet_plugin.llm import offline_merge as merge
from skillduet_plugin.llm.base import ChatBackend, ChatRequest, PermanentError
from skillduet_plugin.llm.config import BackendConfig
from skillduet_plugin.llm.registry import register_backend
from skillduet_plugin.llm.offline_common import (OFFLINE_RULES, OfflineRules, Traj, as_bullets, find_loop,
                                                 first_divergence, parse_traj, strip_instance)

ANALYZER_KINDS = ("local_pair", "local_procedure", "local_correction")
SYNTHESIZER_KINDS = ("synthesize", "compress")


@register_backend("offline")
class OfflineBackend(ChatBackend):
    """Answers from the request payload with deterministic rules (no model, no network)."""

    kind = "offline"
    may_copy_prompt = False  # rules quote the trajectory's actions on purpose

    def __init__(self, config: BackendConfig | None = None, *, role: str = "analyzer") -> None:
        super().__init__(config, role=role)

    async def _complete(self, request: ChatRequest) -> str:
        return respond(request.payload)


def respond(payload: Any) -> str:
    """The offline answer to one payload; raises :class:`PermanentError` for an unusable payload."""
    if not isinstance(payload, dict):
        raise PermanentError("the offline backend needs ChatRequest.payload (a mapping with a 'kind'); "
                             f"got {type(payload).__name__}")
    kind = payload.get("kind")
    handler = _HANDLERS.get(kind)  # type: ignore[arg-type]
    if handler is None:
        raise PermanentError(f"payload['kind']={kind!r} is unknown: allowed values are "
                             f"{', '.join(ANALYZER_KINDS + SYNTHESIZER_KINDS)}")
    return handler(payload)


def _rules(payload: dict[str, Any]) -> OfflineRules:
    """The rules registered for the payload's environment (``register_offline_rules``), else the generic ones
    (they still write useful skills for any environment)."""
    env = str(payload.get("env", "")).lower()
    return OFFLINE_RULES.get(env) if env in OFFLINE_RULES else GENERIC_RULES


def _task(payload: dict[str, Any], traj: Traj, rules: OfflineRules) -> Any:
    return rules.parse_task(str(payload.get("task") or traj.task), str(payload.get("scope", "")))


def _local_pair(payload: dict[str, Any]) -> str:
    success, failure = parse_traj(payload.get("success"), "success"), parse_traj(payload.get("failure"), "failure")
    rules = _rules(payload)
    return as_bullets(rules.pair(_task(payload, success, rules), success, failure))


def _local_procedure(payload: dict[str, Any]) -> str:
    traj = parse_traj(payload.get("trajectory"), "trajectory")
    rules = _rules(payload)
    return as_bullets(rules.local_procedure(_task(payload, traj, rules), traj))


def _local_correction(payload: dict[str, Any]) -> str:
    traj = parse_traj(payload.get("trajectory"), "trajectory")
    rules = _rules(payload)
    return as_bullets(rules.correction(_task(payload, traj, rules), traj))


def _synthesize(payload: dict[str, Any]) -> str:
    current, new = _str_list(payload, "current"), _str_list(payload, "new")
    budget = _positive_int(payload, "budget_tokens")
    return merge.as_global(merge.synthesize(current, new, budget))


def _compress(payload: dict[str, Any]) -> str:
    items = _str_list(payload, "items")
    target = _positive_int(payload, "target_items")
    return merge.as_global(merge.compress(items, target))


def _str_list(payload: dict[str, Any], key: str) -> list[str]:
    value = payload.get(key, [])
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise PermanentError(f"payload[{key!r}] must be a list of strings")
    return list(value)


def _positive_int(payload: dict[str, Any], key: str) -> int:
    value = payload.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PermanentError(f"payload[{key!r}]={value!r} must be a positive integer")
    return value


# ---------------------------------------------------------------------- environments without their own rules
def _effective(traj: Traj) -> list[str]:
    return [strip_instance(s.action) for s in traj.steps if not s.invalid]


def _generic_procedure(task: str, traj: Traj) -> list[str]:
    actions = list(dict.fromkeys(_effective(traj)))
    return [f"Procedure that solved '{task}': " + "; ".join(f"{i + 1}) {a}" for i, a in enumerate(actions)) + "."]


def _generic_correction(task: str, traj: Traj) -> list[str]:
    lines = []
    invalid = [s.action for s in traj.steps if s.invalid]
    if invalid:
        lines.append(f"{len(invalid)} action(s) had no effect (e.g. '{invalid[0]}'): use admissible actions only.")
    loop = find_loop(traj.steps)
    if loop:
        lines.append(f"Stuck repeating {' -> '.join(loop.cycle)} {loop.repeats} times: try something else.")
    lines.append(f"The attempt at '{task}' failed after {len(traj.steps)} actions: reconsider the plan "
                 "before acting.")
    return lines


def _generic_pair(task: str, success: Traj, failure: Traj) -> list[str]:
    s, f = _effective(success), _effective(failure)
    lines = []
    d = first_divergence(s, f)
    if d is not None and d < len(s):
        after = f"after '{s[d - 1]}'" if d > 0 else "at the start"
        other = f"'{f[d]}'" if d < len(f) else "nothing"
        lines.append(f"Key decision {after}: do '{s[d]}' (success), not {other} (failure).")
    lines += _generic_procedure(task, success)
    return lines + _generic_correction(task, failure)[:-1]


GENERIC_RULES = OfflineRules(parse_task=lambda task, scope: task, pair=_generic_pair,
                             local_procedure=_generic_procedure, correction=_generic_correction)


_HANDLERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "local_pair": _local_pair,
    "local_procedure": _local_procedure,
    "local_correction": _local_correction,
    "synthesize": _synthesize,
    "compress": _compress,
}
