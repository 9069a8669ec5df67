"""Translation between verl's TransferQueue batches and the skill lifecycle's Trajectories.

verl V1 keeps one record per trajectory in TransferQueue: token tensors (nested, one row per trajectory),
the agent loop's ``extra_fields`` and the dataset's non-tensor fields. These helpers read them into plain
Python and build the :class:`~skillduet_plugin.skills.types.Trajectory` objects extraction and scoring need.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from skillduet_plugin.integrations.verl import EXTRA_KEY
from skillduet_plugin.rollout.engine import episode_from_record, to_trajectory
from skillduet_plugin.skills.types import Trajectory


def non_tensor_list(value: Any) -> list[Any]:
    """A non-tensor field (NonTensorStack, numpy object array, list) as a plain list of Python objects."""
    if value is None:
        return []
    items = value.tolist() if hasattr(value, "tolist") and not isinstance(value, torch.Tensor) else list(value)
    return [getattr(x, "data", x) if type(x).__name__ == "NonTensorData" else x for x in items]


def tensor_rows(value: torch.Tensor) -> list[torch.Tensor]:
    """Rows of a nested (jagged) or dense ``(batch, n)`` tensor, each a 1-D tensor."""
    if value.is_nested:
        return list(value.unbind())
    return [value[i] for i in range(value.shape[0])]


def nested(rows: Sequence[torch.Tensor]) -> torch.Tensor:
    """A jagged nested tensor from 1-D rows (the layout verl V1 keeps per-token fields in)."""
    return torch.nested.as_nested_tensor([r.contiguous() for r in rows], layout=torch.jagged)


def skillduet_record(extra_fields: Any) -> dict[str, Any] | None:
    """The agent loop's per-trajectory record, or None (a trajectory from another agent loop)."""
    if isinstance(extra_fields, dict):
        record = extra_fields.get(EXTRA_KEY)
        return record if isinstance(record, dict) else None
    return None


def build_trajectories(keys: Sequence[str], records: Sequence[dict[str, Any] | None],
                       prompts: Sequence[torch.Tensor], responses: Sequence[torch.Tensor],
                       response_masks: Sequence[torch.Tensor], old_log_probs: Sequence[torch.Tensor] | None,
                       step: int, skip: Sequence[bool] = ()) -> list[tuple[int, Trajectory]]:
    """``(row, Trajectory)`` for every row that came from the ``skillduet_agent`` loop and is not skipped.

    ``base_logps`` are the old log-probs (rollout weights, student prompt): Strength scoring reuses them. The
    record becomes an episode again and goes through the same mapping as the TRL path
    (``rollout.engine.to_trajectory``), so both hand the analyzer the same turns. ``keys`` are TransferQueue keys
    ``{uid}_{session}_{index}``; the prompt uid is random per run, so the order id is the task with the rest (a task
listed twice in one step's batch gives two rows the same order id, and their order falls back to the uid).
    """
    out: list[tuple[int, Trajectory]] = []
    for i, key in enumerate(keys):
        record = records[i]
        if record is None or (skip and skip[i]):
            continue
        episode = episode_from_record(record, prompt_ids=prompts[i].tolist(), completion_ids=responses[i].tolist(),
                                      completion_mask=response_masks[i].tolist())
        base = [float(x) for x in old_log_probs[i].tolist()] if old_log_probs is not None else None
        traj = to_trajectory(episode, step=int(step), traj_id=str(key), base_logps=base)
        _, sep, rest = str(key).partition("_")
        traj.order_id = f"{traj.task_id}_{rest}" if sep else ""
        out.append((i, traj))
    return out


def trajectory_advantages(advantages: Sequence[torch.Tensor], response_masks: Sequence[torch.Tensor]) -> list[float]:
    """Trajectory-mean advantage over policy tokens (the Utility score's A_r)."""
    out = []
    for adv, mask in zip(advantages, response_masks):
        m = mask.float()
        out.append(float((adv.float() * m).sum() / m.sum().clamp_min(1.0)))
    return out


__all__ = ["build_trajectories", "nested", "non_tensor_list", "skillduet_record", "tensor_rows",
           "trajectory_advantages"]
