"""Choose-mode turns as distributions: what the dense OPD estimator (``opd_estimator=choices``) and the mechanism
metrics read.

A choose-mode policy picks one admissible action per turn with probability ``softmax(sum_logp / temperature)``
(``rollout.choice``). For the turns of an episode that were a real choice (two or more candidates), these helpers
give that distribution under any context, student or teacher, batched as ``(turns, K)`` log-probs with a validity
mask, ready for ``core.opd.opd_expected`` and ``core.opd.expected_stats``.
"""

from __future__ import annotations

from typing import Any, Sequence

from skillduet_plugin.rollout.choice import turn_candidate_logprobs

# (completion offset where the turn's response starts, the candidate responses), as ``Episode.choices`` holds them
Turn = tuple[int, list[list[int]]]


def decision_turns(choices: Sequence[Turn]) -> list[Turn]:
    """The turns that were a choice: two or more candidates (a forced turn teaches nothing)."""
    return [(offset, cands) for offset, cands in choices if len(cands) > 1]


def turn_choice_logps(model: Any, prompt: Sequence[int], completion: Sequence[int], turns: Sequence[Turn], *,
                      temperature: float = 1.0) -> list[Any]:
    """Per turn, the log-probs of the choice among its candidates, ``log_softmax(sum_logp / temperature)``, given
    ``prompt`` + the completion up to the turn (one forward over the episode; gradients flow in grad mode)."""
    if not turns:
        return []
    sequence = list(prompt) + list(completion)
    starts = [(len(prompt) + offset, cands) for offset, cands in turns]
    return [(scores / temperature).log_softmax(-1)
            for scores in turn_candidate_logprobs(model, sequence, starts)]


def pad_turns(rows: Sequence[Any], device: Any = None) -> tuple[Any, Any]:
    """Per-turn ``(K_t,)`` log-prob vectors as ``((turns, K), valid)``, padding 0 with ``valid`` 0."""
    import torch  # lazy: torch

    width = max((r.shape[0] for r in rows), default=1)
    device = device if device is not None else (rows[0].device if rows else "cpu")
    values = torch.zeros((len(rows), width), dtype=torch.float32, device=device)
    valid = torch.zeros((len(rows), width), dtype=torch.float32, device=device)
    for i, r in enumerate(rows):
        values[i, :r.shape[0]] = r.float()
        valid[i, :r.shape[0]] = 1.0
    if not rows:  # an empty batch of turns keeps a graph-free (0, 1) shape
        return values[:0], valid[:0]
    return values, valid


__all__ = ["Turn", "decision_turns", "pad_turns", "turn_choice_logps"]
