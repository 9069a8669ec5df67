"""The engine loss SkillDuet installs on verl's actor: verl's ``ppo_loss`` plus lambda times the gated OPD term.

verl's registered policy losses cannot see extra per-token tensors, so the OPD term is added at the engine-loss
level (``TrainingWorker.set_loss_fn``), where the whole micro-batch TensorDict is visible. The per-token term
is ``core.opd.opd_per_token``; it is aggregated with verl's ``agg_loss`` and the actor's ``global_batch_info``
so the loss stays invariant to how a mini-batch is split into micro-batches and data-parallel ranks.

Normalisation: with ``loss_agg_mode=token-mean`` verl divides by the response tokens of the whole mini-batch,
so the OPD term here is Eq. 1 scaled by the share of response tokens whose trajectory has a Local skill
(logged as ``skillduet/opd_token_ratio``; close to 1 when the analyzer serves every group). The TRL adapter
divides by the supervised tokens themselves (Eq. 1 exactly). verl prefixes every loss metric with ``actor/``, so
these show as ``actor/skillduet/opd_loss``, ``actor/skillduet/opd/gate_active_ratio``, ... in its logger.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable

import torch

from skillduet_plugin.core.opd import opd_loss, opd_per_token

#: ``(batch, response_len)`` teacher log-probs of the sampled tokens under the Local-skill prompt
TEACHER_LOGPROBS_KEY = "skillduet_teacher_log_probs"
#: ``(batch, response_len)`` 1 where a token gets the OPD term (its trajectory has a Local skill), else 0
OPD_MASK_KEY = "skillduet_opd_mask"


def _metric_aggregation(data: Any, config: Any):
    """SUM when the loss is normalised over the global batch (as verl's ``ppo_loss`` decides), else MEAN."""
    from verl.utils.metric import AggregationType

    if (data["dp_size"] > 1 or data["batch_num_tokens"] is not None or data["global_batch_size"] is not None
            or config.loss_scale_factor is not None):
        return AggregationType.SUM
    return AggregationType.MEAN


def _fit_width(tensor: torch.Tensor, width: int) -> torch.Tensor:
    """Right-pad with zeros or cut a ``(batch, n)`` tensor to ``(batch, width)``."""
    if tensor.shape[1] == width:
        return tensor
    if tensor.shape[1] > width:
        return tensor[:, :width]
    return torch.nn.functional.pad(tensor, (0, width - tensor.shape[1]))


def skillduet_ppo_loss(config: Any, model_output: dict, data: Any, dp_group: Any = None, *,
                       opd_coef: float, gate_beta: float = 5.0) -> tuple[torch.Tensor, dict]:
    """``ppo_loss + opd_coef * agg_loss(opd_per_token(s, t)[0], response_mask * opd_mask)`` on one micro-batch.

    Args:
        config: the actor's ``ActorConfig`` (``loss_agg_mode``, ``global_batch_info``, PPO settings).
        model_output: the engine's output; ``log_probs`` is nested over prompt + response.
        data: the micro-batch TensorDict; besides verl's keys it must hold :data:`TEACHER_LOGPROBS_KEY` and
            :data:`OPD_MASK_KEY` (nested or padded, ``(batch, response_len)``), written by the
            ``skillduet_sync`` trainer.
        dp_group: passed through to ``ppo_loss``.
        opd_coef: lambda_OPD; 0 gives exactly verl's ``ppo_loss``.
        gate_beta: beta of the stop-gradient gate.

    Returns:
        ``(loss, metrics)``: verl's metrics plus ``skillduet/opd_loss`` and the gate statistics.
    """
    from verl.trainer.ppo.core_algos import agg_loss
    from verl.utils.metric import AggregationType, Metric
    from verl.workers.utils.losses import ppo_loss
    from verl.workers.utils.padding import no_padding_2_padding

    policy_loss, metrics = ppo_loss(config, model_output, data, dp_group)
    if opd_coef == 0:
        return policy_loss, metrics
    missing = [k for k in (TEACHER_LOGPROBS_KEY, OPD_MASK_KEY) if k not in data.keys()]
    if missing:
        raise KeyError(f"the SkillDuet loss needs {', '.join(missing)} in the actor batch: run with "
                       f"trainer.v1.trainer_mode=skillduet_sync (it writes them), or set skillduet.opd_coef=0")
    student = no_padding_2_padding(model_output["log_probs"], data)  # (batch, response_len), with grad
    extra = data.select("response_mask", TEACHER_LOGPROBS_KEY, OPD_MASK_KEY).to_padded_tensor()
    width = student.shape[1]
    teacher = _fit_width(extra[TEACHER_LOGPROBS_KEY].to(student.device, torch.float32), width)
    mask = (_fit_width(extra["response_mask"].float(), width) *
            _fit_width(extra[OPD_MASK_KEY].float(), width)).to(student.device)

    per_token, _gate = opd_per_token(student, teacher, beta=gate_beta)
    opd = agg_loss(loss_mat=per_token, loss_mask=mask, loss_agg_mode=config.loss_agg_mode,
                   **config.global_batch_info)
    _, stats = opd_loss(student.detach(), teacher, mask, beta=gate_beta)
    metrics["skillduet/opd_loss"] = Metric(value=opd.detach(), aggregation=_metric_aggregation(data, config))
    for name in ("opd/gate_mean", "opd/gate_active_ratio", "opd/teacher_minus_student"):
        metrics[f"skillduet/{name}"] = Metric(value=stats[name], aggregation=AggregationType.MEAN)
    metrics["skillduet/opd_token_ratio"] = Metric(
        value=(mask.sum() / extra["response_mask"].float().sum().clamp_min(1.0)).item(),
        aggregation=AggregationType.MEAN)
    return policy_loss + opd_coef * opd, metrics


def make_loss_fn(actor_config: Any, *, opd_coef: float, gate_beta: float = 5.0) -> Callable:
    """The picklable callable for ``actor_rollout_wg.set_loss_fn`` (sent to every rank)."""
    return partial(skillduet_ppo_loss, config=actor_config, opd_coef=float(opd_coef), gate_beta=float(gate_beta))


__all__ = ["OPD_MASK_KEY", "TEACHER_LOGPROBS_KEY", "make_loss_fn", "skillduet_ppo_loss"]
