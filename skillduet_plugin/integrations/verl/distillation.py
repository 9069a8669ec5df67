"""SkillDuet's gated OPD term (the paper's Eq. 1) in verl 0.9's distillation-loss registry.

A lab already running verl's on-policy distillation (``distillation.enabled=true``, a teacher model served beside
the rollout) selects the term by name::

    distillation.distillation_loss.loss_mode=skillduet_opd
    distillation.distillation_loss.use_policy_gradient=false   # Eq. 1 is backpropagated directly
    distillation.distillation_loss.loss_max_clamp=null         # verl clamps per-token losses to +-10 by default

verl then computes, per response token, ``g (sg[t] - s)`` with ``g = sg[sigmoid(beta (t - s))]`` (``t`` its
teacher's log-prob of the sampled token, ``s`` the student's), aggregates it with the actor's ``loss_agg_mode`` and
adds ``distillation_loss_coef`` times it to the PPO loss (``use_task_rewards=true``) exactly as the
``skillduet_sync`` trainer's engine loss does with ``skillduet.opd_coef`` (``tests/verl/test_distillation_registry.py``
compares the two gradients on one batch). verl's teacher there is whatever ``distillation.teacher_models`` names,
prompted like the student; SkillDuet's own teacher (the policy with the trajectory's Local skill) needs the
``skillduet_sync`` trainer. ``beta`` is the method's default :data:`GATE_BETA` (verl's loss config has no field for
it). Only the sampled-token form is registered: verl 0.9.1's top-k path (``use_topk``) computes forward KL in its
logits processor whatever the loss's name, so ``skillduet.opd_estimator=topk`` lives in the engine loss
(``integrations.verl.topk``). The gate statistics (``distillation/skillduet_gate_mean``, ``..._gate_active_ratio``)
are token means over the batch's response tokens, weighted like the engine loss's (``loss.batch_share``), so they do
not move with how verl groups rows into micro-batches.

Imported by the ``verl.plugins`` entry point when verl imports ``verl.trainer.distillation``, in every process.
"""

from __future__ import annotations

from typing import Any

from verl.trainer.distillation.losses import (DISTILLATION_LOSS_REGISTRY, DistillationLossSettings,
                                              register_distillation_loss)
from verl.utils.metric import AggregationType, Metric
from verl.workers.utils.padding import no_padding_2_padding

from skillduet_plugin.config import SkillDuetConfig
from skillduet_plugin.core.opd import opd_per_token
from skillduet_plugin.core.settings import declared_default
from skillduet_plugin.integrations.verl.loss import batch_share

#: the name under ``distillation.distillation_loss.loss_mode``
DISTILLATION_LOSS_NAME = "skillduet_opd"
#: the gate's beta on this path: the method's default
GATE_BETA = float(declared_default(SkillDuetConfig, "gate_beta"))


def skillduet_opd_distillation_loss(config: Any, distillation_config: Any, model_output: dict,
                                    data: Any) -> tuple[Any, dict[str, Any]]:
    """verl's distillation-loss contract: per-token Eq. 1 terms ``(batch, response_len)`` and metrics."""
    loss_config = distillation_config.distillation_loss
    if loss_config.use_policy_gradient:
        raise ValueError(f"distillation.distillation_loss.use_policy_gradient=True is invalid for loss_mode="
                         f"{DISTILLATION_LOSS_NAME}: Eq. 1 is backpropagated directly; set "
                         "distillation.distillation_loss.use_policy_gradient=false")
    student = no_padding_2_padding(model_output["log_probs"], data)
    teacher = no_padding_2_padding(data["teacher_logprobs"], data)
    if teacher.dim() == student.dim() + 1:
        teacher = teacher.squeeze(-1)
    mask = data["response_mask"]
    mask = (mask.to_padded_tensor(0) if mask.is_nested else mask).bool()
    per_token, gate = opd_per_token(student, teacher, beta=GATE_BETA)
    n = mask.sum().clamp_min(1)
    stats = {"distillation/skillduet_gate_mean": (gate * mask).sum() / n,
             "distillation/skillduet_gate_active_ratio": ((gate > 0.5) & mask).sum() / n}
    share = batch_share(mask.sum(), config, data)
    if share is None:  # no global batch info: each micro-batch's own means, averaged
        metrics = {k: Metric(AggregationType.MEAN, v) for k, v in stats.items()}
    else:  # token means over the batch's response tokens, whichever rows share a micro-batch (as the engine loss)
        metrics = {k: Metric(AggregationType.SUM, v * share) for k, v in stats.items()}
    return per_token, metrics


if DISTILLATION_LOSS_NAME not in DISTILLATION_LOSS_REGISTRY:
    register_distillation_loss(DistillationLossSettings(names=[DISTILLATION_LOSS_NAME], use_estimator=True))(
        skillduet_opd_distillation_loss)

__all__ = ["DISTILLATION_LOSS_NAME", "GATE_BETA", "skillduet_opd_distillation_loss"]
