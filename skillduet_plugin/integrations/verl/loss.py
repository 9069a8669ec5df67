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
info a micro-batch is normalised by itself, and one with no supervised token contributes 0, never NaN. The gate
statistics and ``opd_token_ratio`` are weighted the same way, so they are token means over the batch whichever rows
share a micro-batch (without global batch info: micro-batch means, averaged). verl prefixes every loss metric with
``actor/``, so these show as ``actor/skillduet/opd_loss``, ``actor/skillduet/opd/gate_active_ratio``, ... in its
logger.

``skillduet.opd_estimator=topk`` replaces the sampled per-token term by ``core.opd.opd_expected`` over the teacher's
top-k tokens of each position, computed in verl's logits-processor call of this same function
(``integrations.verl.topk``) and aggregated identically. ``skillduet.policy_loss_coef`` scales ``ppo_loss``.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, Sequence

import torch

from skillduet_plugin.core.opd import opd_loss, opd_per_token
from skillduet_plugin.integrations.verl.topk import (TEACHER_TOPK_REQUEST, TOPK_STATS_KEY, TOPK_TERM_KEY,
                                                     response_positions, student_topk_outputs, teacher_topk_outputs)

#: ``(batch, response_len)`` teacher log-probs of the sampled tokens under the Local-skill prompt
TEACHER_LOGPROBS_KEY = "skillduet_teacher_log_probs"
#: ``(batch, response_len)`` OPD token weight: > 0 where a token gets the OPD term (its trajectory has a Local
#: skill), else 0; the trainer writes ``N_response / N_supervised`` of the batch (:func:`opd_token_weights`)
OPD_MASK_KEY = "skillduet_opd_mask"


def _metric_aggregation(data: Any, config: Any):
    """SUM when the loss is normalised over the global batch (as verl's ``ppo_loss`` decides), else MEAN."""
    from verl.utils.metric import AggregationType  # lazy: verl (imports transformers)

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


def skillduet_ppo_loss(config: Any, model_output: dict | None = None, data: Any = None, dp_group: Any = None, *,
                       opd_coef: float, gate_beta: float, policy_loss_coef: float, estimator: str, topk: int,
                       student_logits: torch.Tensor | None = None, data_format: str = "thd") -> Any:
    """``policy_loss_coef * ppo_loss + opd_coef * L_OPD`` on one micro-batch, L_OPD normalised as Eq. 1 over the
    batch (module text).

    Args:
        config: the actor's ``ActorConfig`` (``loss_agg_mode``, ``global_batch_info``, PPO settings).
        model_output: the engine's output; ``log_probs`` is nested over prompt + response.
        data: the micro-batch TensorDict; besides verl's keys it must hold :data:`TEACHER_LOGPROBS_KEY` and
            :data:`OPD_MASK_KEY` (nested or padded, ``(batch, response_len)``), written by the
            ``skillduet_sync`` trainer (``estimator="topk"``: the teacher's top-k ids and log-probs instead of
            :data:`TEACHER_LOGPROBS_KEY`, ``integrations.verl.topk``).
        dp_group: passed through to ``ppo_loss``.
        opd_coef: lambda_OPD; 0 gives exactly verl's ``ppo_loss`` (times ``policy_loss_coef``).
        gate_beta: beta of the stop-gradient gate.
        policy_loss_coef: weight of verl's ``ppo_loss`` (``skillduet.policy_loss_coef``; 1 is the method).
        estimator: ``skillduet.opd_estimator``: ``sampled`` (Eq. 1 on the sampled token) or ``topk``.
        topk: ``skillduet.opd_topk``.
        student_logits: set when verl's engine calls this as its logits processor (``distillation_use_topk``): the
            return value is then the processor's per-position tensors (``integrations.verl.topk``).
        data_format: the processor's packing format (verl passes it; the top-k path needs ``thd``).

    Returns:
        ``(loss, metrics)``: verl's metrics plus ``skillduet/opd_loss`` and the gate statistics.
    """
    if student_logits is not None:
        return _logits_processor(student_logits, data, beta=gate_beta, k=topk)
    from verl.utils.metric import AggregationType, Metric  # lazy: verl (imports transformers)
    from verl.workers.utils.losses import ppo_loss  # lazy: verl (imports transformers)
    from verl.workers.utils.padding import no_padding_2_padding  # lazy: verl (imports transformers)

    if _teacher_request(data):  # the teacher pass asked for its top-k only: no loss
        return torch.zeros(()), {}
    policy_loss, metrics = ppo_loss(config, model_output, data, dp_group)
    if policy_loss_coef != 1.0:
        policy_loss = policy_loss * policy_loss_coef
    if opd_coef == 0:
        return policy_loss, metrics
    needed = (TOPK_TERM_KEY,) if estimator == "topk" else (TEACHER_LOGPROBS_KEY,)
    missing = [k for k in (*needed, OPD_MASK_KEY) if k not in data.keys() and k not in model_output]
    if missing:
        raise KeyError(f"the SkillDuet loss needs {', '.join(missing)} in the actor batch: run with "
                       f"trainer.v1.trainer_mode=skillduet_sync (it writes them), or set skillduet.opd_coef=0")
    student = no_padding_2_padding(model_output["log_probs"], data)  # (batch, response_len), with grad
    extra = data.select("response_mask", OPD_MASK_KEY).to_padded_tensor()
    width = student.shape[1]
    weights = (_fit_width(extra["response_mask"].float(), width) *
               _fit_width(extra[OPD_MASK_KEY].float(), width)).to(student.device)
    mask = (weights > 0).float()
    if estimator == "topk":
        per_token = _fit_width(no_padding_2_padding(model_output[TOPK_TERM_KEY], data).float(), width)
        stats = _topk_stats(data)
    else:
        teacher = data.select(TEACHER_LOGPROBS_KEY).to_padded_tensor()[TEACHER_LOGPROBS_KEY]
        teacher = _fit_width(teacher.to(student.device, torch.float32), width)
        per_token, _gate = opd_per_token(student, teacher, beta=gate_beta)
        _, stats = opd_loss(student.detach(), teacher, mask, beta=gate_beta)
        stats.pop("opd/loss")  # the batch-normalised value is logged below
    opd = _aggregate(per_token, weights, mask, config, data)
    metrics["skillduet/opd_loss"] = Metric(value=opd.detach(), aggregation=_metric_aggregation(data, config))
    share = batch_share(weights.sum(), config, data)
    if share is None:  # no global batch info: each micro-batch's own means, averaged
        for name, value in stats.items():
            metrics[f"skillduet/{name}"] = Metric(value=value, aggregation=AggregationType.MEAN)
        metrics["skillduet/opd_token_ratio"] = Metric(
            value=(mask.sum() / extra["response_mask"].float().sum().clamp_min(1.0)).item(),
            aggregation=AggregationType.MEAN)
    else:  # token means over the whole batch, whichever rows share a micro-batch
        for name, value in stats.items():
            metrics[f"skillduet/{name}"] = Metric(value=value * share, aggregation=AggregationType.SUM)
        metrics["skillduet/opd_token_ratio"] = Metric(value=_token_ratio(mask, data), aggregation=AggregationType.SUM)
    return policy_loss + opd_coef * opd, metrics


def batch_share(count: torch.Tensor, config: Any, data: Any) -> float | None:
    """What a micro-batch's token means weigh in the batch's token means, given ``count``, the micro-batch's tokens
    in verl's ``batch_num_tokens`` units; None without global batch info (or outside ``token-mean``).

    Means over a micro-batch's tokens, averaged over micro-batches, would depend on which rows verl puts together
    (it orders a step's rows by random uids, so two runs of the same work group them differently). Weighted by
    ``count / batch_num_tokens * dp_size`` and logged as SUM (verl sums a rank's micro-batches and averages the
    ranks) they are token means over the whole batch. The engine loss passes the sum of its OPD weights: the
    supervised tokens carry ``N_response / N_supervised`` each (:func:`opd_token_weights`), so that sum over
    ``batch_num_tokens`` is the micro-batch's share of the batch's supervised tokens. The distillation-registry loss
    passes its response tokens.
    """
    total = data["batch_num_tokens"]
    if config.loss_agg_mode != "token-mean" or total is None:
        return None
    return float(count / torch.as_tensor(total, dtype=torch.float32).clamp_min(1.0) * (data["dp_size"] or 1))


def _token_ratio(mask: torch.Tensor, data: Any) -> float:
    """This micro-batch's supervised tokens over the batch's response tokens (times ``dp_size``): summed over
    micro-batches and averaged over ranks, the batch's share of supervised tokens."""
    total = torch.as_tensor(data["batch_num_tokens"], dtype=torch.float32).clamp_min(1.0)
    return float(mask.sum() / total * (data["dp_size"] or 1))


def _teacher_request(data: Any) -> bool:
    from verl.utils import tensordict_utils as tu  # lazy: verl (imports transformers)

    return bool(tu.get_non_tensor_data(data=data, key=TEACHER_TOPK_REQUEST, default=0))


def _logits_processor(student_logits: torch.Tensor, data: Any, *, beta: float, k: int) -> dict:
    """verl's logits-processor call: the teacher's top-k (teacher pass) or the student's expected term (update)."""
    from verl.utils import tensordict_utils as tu  # lazy: verl (imports transformers)

    request = int(tu.get_non_tensor_data(data=data, key=TEACHER_TOPK_REQUEST, default=0) or 0)
    if request:
        return teacher_topk_outputs(student_logits, data, request)
    _, response_lens = response_positions(data)
    extra = data.select("response_mask", OPD_MASK_KEY)
    rows = zip(extra["response_mask"].unbind(), extra[OPD_MASK_KEY].unbind())
    weights = torch.cat([(m.float() * w.float())[:n] for (m, w), n in zip(rows, response_lens)])
    return student_topk_outputs(student_logits, data, beta=beta, k=k, weights=weights)


def _topk_stats(data: Any) -> dict[str, float]:
    from verl.utils import tensordict_utils as tu  # lazy: verl (imports transformers)

    stats = tu.get_non_tensor_data(data=data, key=TOPK_STATS_KEY, default=None)
    if stats is None:
        raise KeyError("skillduet.opd_estimator=topk: verl's engine did not call the loss as its logits processor "
                       "(the update batch needs distillation_use_topk=True, set by the skillduet_sync trainer)")
    return dict(stats)


def _aggregate(per_token: torch.Tensor, weights: torch.Tensor, mask: torch.Tensor, config: Any,
               data: Any) -> torch.Tensor:
    """The OPD term of one micro-batch: weighted ``token-mean`` over the global batch (see the module text),
    verl's ``agg_loss`` over the binary mask for the other modes; 0 (with a graph) for an empty micro-batch
    without global batch info."""
    from verl.trainer.ppo.core_algos import agg_loss  # lazy: verl (imports transformers)

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


def make_loss_fn(actor_config: Any, *, opd_coef: float, gate_beta: float, policy_loss_coef: float, estimator: str,
                 topk: int) -> Callable:
    """The picklable callable for ``actor_rollout_wg.set_loss_fn`` (sent to every rank); the method settings come
    from the run's ``skillduet`` config (``opd_coef``, ``gate_beta``, ``policy_loss_coef``, ``opd_estimator``,
    ``opd_topk``), as the ``skillduet_sync`` trainer passes them."""
    if estimator not in ("sampled", "topk"):
        raise ValueError(f"skillduet.opd_estimator={estimator!r} is invalid on verl: use sampled or topk")
    return partial(skillduet_ppo_loss, config=actor_config, opd_coef=float(opd_coef), gate_beta=float(gate_beta),
                   policy_loss_coef=float(policy_loss_coef), estimator=estimator, topk=int(topk))


__all__ = ["OPD_MASK_KEY", "TEACHER_LOGPROBS_KEY", "make_loss_fn", "opd_token_weights", "skillduet_ppo_loss"]
