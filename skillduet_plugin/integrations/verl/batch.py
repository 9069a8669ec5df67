"""Translation between verl's TransferQueue batches and the skill lifecycle's Trajectories.

verl V1 keeps one record per trajectory in TransferQueue: token tensors (nested, one row per trajectory),
the agent loop's ``extra_fields`` and the dataset's non-tensor fields. These helpers read them into plain
Python and build the :class:`~skillduet_plugin.skills.types.Trajectory` objects extraction and scoring need.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from skillduet_plugin.integrations.verl import EXTRA_KEY
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

    ``base_logps`` are the old log-probs (rollout weights, student prompt): Strength scoring reuses them.
    """
    out: list[tuple[int, Trajectory]] = []
    for i, key in enumerate(keys):
        record = records[i]
        if record is None or (skip and skip[i]):
            continue
        completion = [int(x) for x in responses[i].tolist()]
        mask = [int(x) for x in response_masks[i].tolist()]
        base = [float(x) for x in old_log_probs[i].tolist()] if old_log_probs is not None else None
        traj = Trajectory(
            traj_id=str(key), task_id=str(record["task_id"]), scope=str(record.get("scope", "unknown")),
            task=str(record.get("task", "")), messages=list(record.get("messages") or []),
            prompt_messages=list(record.get("prompt_messages") or []),
            responses=list(record.get("responses") or []), reward=float(record.get("reward", 0.0)),
            success=bool(record.get("won", False)), split="train", step=int(step),
            prompt_ids=[int(x) for x in prompts[i].tolist()], completion_ids=completion, completion_mask=mask,
            base_logps=base, global_version=record.get("global_version"),
            metadata={"env": record.get("env"), "actions": list(record.get("actions") or []),
                      "observations": list(record.get("observations") or []),
                      "valid": list(record.get("valid") or []), "score": record.get("score"),
                      "num_turns": record.get("num_turns"), "truncated": record.get("truncated")})
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
