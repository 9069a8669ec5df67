"""Names the core and the adapters accept, importable without torch (every config validates against these)."""

from __future__ import annotations

from typing import Callable

#: How per-token OPD terms are aggregated (``core.opd.aggregate``); the paper's Eq. 1 is ``token-mean``.
OPD_AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")

#: What OPD distils (``skillduet.opd_estimator``): the paper's Eq. 1 on the one sampled token (``sampled``), or its
#: exact expectation under the student over every admissible action of a choose-mode turn (``choices``) or over the
#: teacher's top-k tokens per position (``topk``); ``core.opd.opd_expected`` computes the last two.
OPD_ESTIMATORS = ("sampled", "choices", "topk")

#: When OPD teacher log-probs are computed: once per rollout batch, or live in every loss call.
TEACHER_AT = ("generation", "loss")

#: How the policy acts each turn: free generation, or a choice among the admissible actions (``rollout.choice``).
ACTION_SELECTIONS = ("generate", "choose")

#: The scope key of the one Global that ``scope=single`` keeps for every task.
SINGLE_SCOPE = "all"

#: What a Global serves (``skillduet.scope``): kind -> ``(task_type, task_id) -> scope key``. The one table of
#: scope kinds: the config validates against its keys and :func:`scope_key` applies it.
SCOPE_KEYS: dict[str, Callable[[str, str], str]] = {
    "task_type": lambda task_type, task_id: str(task_type),
    "task": lambda task_type, task_id: str(task_id),
    "single": lambda task_type, task_id: SINGLE_SCOPE,
}


def scope_key(kind: str, *, task_type: str, task_id: str) -> str:
    """The scope key of a task under ``config.scope``: its task type, its task id, or one scope for all."""
    if kind not in SCOPE_KEYS:
        raise ValueError(f"scope={kind!r} is invalid: allowed values are {', '.join(SCOPE_KEYS)}")
    return SCOPE_KEYS[kind](task_type, task_id)


__all__ = ["ACTION_SELECTIONS", "OPD_AGGREGATIONS", "OPD_ESTIMATORS", "SCOPE_KEYS", "SINGLE_SCOPE", "TEACHER_AT",
           "scope_key"]
