"""The engine loss SkillDuet installs on verl's actor: verl's ``ppo_loss`` plus lambda times the gated OPD term.

verl's registered policy losses cannot see extra per-token tensors, so the OPD term is added at the engine-loss
level (``TrainingWorker.set_loss_fn``), where the whole micro-batch TensorDict is visible. The per-token term
is ``core.opd.opd_per_token``; it is aggregated with the actor's ``global_batch_info`` so the loss stays
invariant to how a mini-batch is split into micro-batches and data-parallel ranks.

Normalisation (Eq. 1 over the whole batch, however verl splits it into micro-batches and data-parallel ranks):
verl's ``token-mean`` divides every micro-batch's sum by the mini-batch's response tokens over all ranks
(``batch_num_tokens``) and multiplies by ``dp_size``. The ``skillduet_sync`` trainer writes :data:`OPD_MASK_KEY`
as token *weights*: 0 on unsupervised tokens and ``N_response / N_supervised`` of the batch on supervised ones
(:func:`opd_token_weights`), so ``sum(w * x) / batch_num_tokens`` is ``sum(M * x) / N_supervised``: Eq. 1 over
the batch. Exact when a step has one mini-batch (``ppo_mini_batch_size`` = the train batch); with several
mini-batches each is normalised by its own response tokens times the batch's supervised share. Without global batch
info a micro-batch is normalised by itself, and one with no supervised token contributes 0, never NaN. verl
prefixes every loss metric with ``actor/``, so these show as ``actor/skillduet/opd_loss``,
``actor/skillduet/opd/gate_active_ratio``, ... in its logger.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, Sequence

import torch

from skillduet_plugin.core.opd import opd_loss, opd_per_token

#: ``(batch, response_len)`` teacher log-probs of the sampled tokens under the Local-skill prompt
TEACHER_LOGPROBS_KEY = "skillduet_teacher_log_probs"
#: ``(batch, response_len)`` OPD token weight: > 0 where a token gets the OPD term (its trajectory has a Local
#: skill), else 0; the trainer writes ``N_response / N_supervised`` of the batch (:func:`opd_token_weights`)
OPD_MASK_KEY = "skillduet_opd_mask"


def _metric_aggregation(data: Any, config: Any):
    """SUM when the loss is normalised over the global batch (as verl's ``ppo_loss`` decides), else MEAN."""
    from verl.utils.metric import AggregationType  # lazy: imports transformers

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
    """``ppo_loss + opd_coef * L_OPD`` on one micro-batch, L_OPD normalised as Eq. 1 over the batch (module text).

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
    from verl.utils.metric import AggregationType, Metric  # lazy: imports transformers
    from verl.workers.utils.losses import ppo_loss  # lazy: imports transformers
    from verl.workers.utils.padding import no_padding_2_padding  # lazy: imports transformers

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
    weights = (_fit_width(extra["response_mask"].float(), width) *
               _fit_width(extra[OPD_MASK_KEY].float(), width)).to(student.device)
    mask = (weights > 0).float()

    per_token, _gate = opd_per_token(student, teacher, beta=gate_beta)
    opd = _aggregate(per_token, weights, mask, config, data)
    _, stats = opd_loss(student.detach(), teacher, mask, beta=gate_beta)
    metrics["skillduet/opd_loss"] = Metric(value=opd.detach(), aggregation=_metric_aggregation(data, config))
    for name in ("opd/gate_mean", "opd/gate_active_ratio", "opd/teacher_minus_student"):
        metrics[f"skillduet/{name}"] = Metric(value=stats[name], aggregation=AggregationType.MEAN)
    metrics["skillduet/opd_token_ratio"] = Metric(
        value=(mask.sum() / extra["response_mask"].float().sum().clamp_min(1.0)).item(),
        aggregation=AggregationType.MEAN)
    return policy_loss + opd_coef * opd, metrics


def _aggregate(per_token: torch.Tensor, weights: torch.Tensor, mask: torch.Tensor, config: Any,
               data: Any) -> torch.Tensor:
    """The OPD term of one micro-batch: weighted ``token-mean`` over the global batch (see the module text),
    verl's ``agg_loss`` over the binary mask for the other modes; 0 (with a graph) for an empty micro-batch
    without global batch info."""
    from verl.trainer.ppo.core_algos import agg_loss  # lazy: imports transformers

    total, dp_size = data["batch_num_tokens"], data["dp_size"] or 1
    if config.loss_agg_mode == "token-mean":
        if total is None:
            if dp_size > 1:
                raise ValueError("(global) batch_num_tokens is required when dp_size > 1")
            total = weights.sum()
        return (per_token * weights).sum() / torch.as_tensor(total, dtype=per_token.dtype).clamp_min(1.0) * dp_size
    if mask.sum() == 0 and total is None and data["global_batch_size"] is None:
        return (per_token * mask).sum()
    return agg_loss(loss_mat=per_token, loss_mask=mask, loss_agg_mode=config.loss_agg_mode,
                    **config.global_batch_info)


def opd_token_weights(response_masks: Sequence[torch.Tensor], supervised: Sequence[bool]) -> list[torch.Tensor]:
    """Per-row :data:`OPD_MASK_KEY` values: ``N_response / N_supervised`` (over the whole batch) on the response
    tokens of supervised rows, 0 elsewhere; all 0 when no row is supervised."""
    n_response = float(sum(float(m.float().sum()) for m in response_masks))
    n_supervised = float(sum(float(m.float().sum()) for m, ok in zip(response_masks, supervised) if ok))
    scale = n_response / n_supervised if n_supervised > 0 else 0.0
    return [m.to(torch.float32) * (scale if ok else 0.0) for m, ok in zip(response_masks, supervised)]


def make_loss_fn(actor_config: Any, *, opd_coef: float, gate_beta: float = 5.0) -> Callable:
    """The picklable callable for ``actor_rollout_wg.set_loss_fn`` (sent to every rank)."""
    return partial(skillduet_ppo_loss, config=actor_config, opd_coef=float(opd_coef), gate_beta=float(gate_beta))


__all__ = ["OPD_MASK_KEY", "TEACHER_LOGPROBS_KEY", "make_loss_fn", "opd_token_weights", "skillduet_ppo_loss"]
