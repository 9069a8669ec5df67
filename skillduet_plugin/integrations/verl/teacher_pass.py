"""The ``skillduet_sync`` trainer's teacher pass: teacher and scoring log-probs from the source
``skillduet.teacher_logprobs`` names (the actor's FSDP forward, or prefill requests to the rollout servers), the
teacher tensors the engine loss reads, and the actor update (with ``opd_estimator=topk``, verl's logits-processor
flag). Mixed into ``SkillDuetTrainer``, which holds ``config``, ``skillduet``, ``lifecycle``, ``chat``,
``actor_rollout_wg``, ``llm_server_manager`` and the step's ``_trajectories`` / ``_extraction``.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from skillduet_plugin.integrations.verl.batch import nested
from skillduet_plugin.integrations.verl.groups import prefetched_rows
from skillduet_plugin.integrations.verl.loss import OPD_MASK_KEY, TEACHER_LOGPROBS_KEY, opd_token_weights
from skillduet_plugin.integrations.verl.server_logprobs import max_abs_diff, opd_loss_gap, server_response_logprobs
from skillduet_plugin.integrations.verl.teacher import compute_response_logprobs
from skillduet_plugin.integrations.verl.topk import TEACHER_TOPK_IDS_KEY, TEACHER_TOPK_LOGPROBS_KEY
from skillduet_plugin.skills.teacher_plan import TeacherPlan, plan_teacher


class TeacherPass:
    """The teacher pass and the actor update of ``SkillDuetTrainer``."""

    def _actor_dp_size(self) -> int:
        wg = self.actor_rollout_wg
        if "actor" not in wg._dispatch_info:
            wg._dispatch_info["actor"] = wg._query_dispatch_info("actor")
        return max(wg._dispatch_info["actor"]) + 1

    def _logprob_fn(self, contexts, responses) -> list[torch.Tensor]:
        """Teacher and scoring log-probs from the source ``skillduet.teacher_logprobs`` names."""
        source = getattr(self.skillduet, "teacher_logprobs", "actor")
        if source == "actor":
            return self._actor_logprobs(contexts, responses)
        values = self._server_logprobs(contexts, responses)
        if source == "compare":
            self._note_gap(values, self._actor_logprobs(contexts, responses))
        return values

    def _note_gap(self, served: list[torch.Tensor], actor: list[torch.Tensor]) -> None:
        gap = max_abs_diff(served, actor)
        self._check["logprob_max_abs_diff"] = max(self._check.get("logprob_max_abs_diff", 0.0), gap)

    def _client(self) -> Any:
        if getattr(self, "_server_client", None) is None:
            self._server_client = self.llm_server_manager.get_client()
        return self._server_client

    def _server_logprobs(self, contexts, responses) -> list[torch.Tensor]:
        return server_response_logprobs(self._client(), contexts, responses)

    def _actor_logprobs(self, contexts, responses, topk: int = 0) -> list:
        # verl's engine splits each rank's rows into micro-batches of exactly log_prob_micro_batch_size_per_gpu
        # (unless dynamic batch sizes are on): pad the request to a multiple of dp x that size.
        rollout = self.config.actor_rollout_ref.rollout
        micro = 1 if rollout.get("log_prob_use_dynamic_bsz", False) else \
            int(rollout.get("log_prob_micro_batch_size_per_gpu", None) or 1)
        return compute_response_logprobs(self.actor_rollout_wg, contexts, responses, temperature=rollout.temperature,
                                         dp_size=self._actor_dp_size() * micro, topk=topk)

    def _topk(self) -> int:
        """The teacher's top-k per position the loss needs (``opd_estimator=topk``), else 0."""
        method = self.skillduet.method
        return int(method.opd_topk) if method.opd_estimator == "topk" and method.opd_coef > 0 else 0

    def _update_actor(self, batch: Any, metrics: dict) -> Any:
        """verl's update; with ``opd_estimator=topk`` the update batch asks verl's engine to call the loss as its
        logits processor (the flag verl's own top-k distillation sets), where the expected term is computed."""
        if not self._topk():
            return super()._update_actor(batch, metrics)
        wg = self.actor_rollout_wg
        update = wg.update_actor

        def update_with_topk(data):
            data.extra_info["distillation_use_topk"] = True
            return update(data)

        wg.update_actor = update_with_topk
        try:
            return super()._update_actor(batch, metrics)
        finally:
            wg.update_actor = update

    def _teacher_plan(self, prompts, responses) -> TeacherPlan:
        """The teacher context of every row of the batch (``skills.teacher_plan``, as on TRL)."""
        return plan_teacher(prompts, responses, self._trajectories, self._extraction, self.lifecycle, self.chat)

    def _put_teacher_logprobs(self, batch, plan: TeacherPlan, masks, metrics) -> Any:
        """Teacher log-probs of every row with a Local skill and the OPD token weights, written to the batch."""
        if self._topk():
            return self._put_teacher_topk(batch, plan, masks, metrics)
        rows = plan.rows
        teacher = [torch.zeros(len(r), dtype=torch.float32) for r in plan.responses]
        reference = list(teacher)  # teacher_logprobs=compare: the actor's teacher rows
        compare = self.skillduet.teacher_logprobs == "compare"
        traj_of = {row: traj.traj_id for row, traj in self._trajectories}
        if rows:
            # rows whose group sent its prefills during the rollout, then the rest in one concurrent batch
            served = prefetched_rows(self._group_work, plan.contexts, plan.responses, traj_of, rows)
            todo = [i for i in rows if i not in served]
            metrics["skillduet/teacher_rows_prefetched"] = len(served)
            if todo:
                ctx, resp = [plan.contexts[i] for i in todo], [plan.responses[i] for i in todo]
                served.update(zip(todo, self._server_logprobs(ctx, resp) if compare else self._logprob_fn(ctx, resp)))
            for i in rows:
                teacher[i] = served[i]
            if compare:
                actor = self._actor_logprobs([plan.contexts[i] for i in rows], [plan.responses[i] for i in rows])
                self._note_gap([teacher[i] for i in rows], actor)
                for i, value in zip(rows, actor):
                    reference[i] = value
        self._group_work = []
        self._teacher_rows = {traj_of[i]: teacher[i] for i in rows if i in traj_of}
        self._reference_rows = {traj_of[i]: reference[i] for i in rows if i in traj_of}
        if compare:
            old = [torch.tensor(t.base_logps or [0.0] * len(plan.responses[row])) for row, t in self._trajectories]
            picked = [row for row, _ in self._trajectories]
            loss_rollout, loss_actor = opd_loss_gap(old, [teacher[i] for i in picked], [reference[i] for i in picked],
                                                    [masks[i] for i in picked], [plan.has_skill[i] for i in picked],
                                                    beta=self.skillduet.method.gate_beta)
            self._check["opd_loss_rollout"], self._check["opd_loss_actor"] = loss_rollout, loss_actor
            self._check["opd_loss_abs_diff"] = abs(loss_rollout - loss_actor)
        opd_mask = opd_token_weights(masks, plan.has_skill)  # Eq. 1 over the whole batch (loss.py)
        metrics["skillduet/opd_trajectory_ratio"] = plan.num_supervised / max(1, len(self._trajectories))
        fields = TensorDict({TEACHER_LOGPROBS_KEY: nested(teacher), OPD_MASK_KEY: nested(opd_mask)},
                            batch_size=len(teacher))
        return self._tq_put(batch, fields)

    def _put_teacher_topk(self, batch, plan: TeacherPlan, masks, metrics) -> Any:
        """``opd_estimator=topk``: one actor pass over the teacher rows gives the sampled tokens' log-probs (Strength's
        free rows) and the teacher's top-k of every position (the loss's alternatives)."""
        k, rows = self._topk(), plan.rows
        teacher = [torch.zeros(len(r), dtype=torch.float32) for r in plan.responses]
        ids = [torch.zeros(len(r) * k, dtype=torch.long) for r in plan.responses]
        logps = [torch.zeros(len(r) * k, dtype=torch.float32) for r in plan.responses]
        if rows:
            served = self._actor_logprobs([plan.contexts[i] for i in rows], [plan.responses[i] for i in rows], topk=k)
            for i, (row, top_ids, top_logps) in zip(rows, served):
                teacher[i], ids[i], logps[i] = row, top_ids.reshape(-1), top_logps.reshape(-1).float()
        traj_of = {row: traj.traj_id for row, traj in self._trajectories}
        self._group_work = []
        self._teacher_rows = {traj_of[i]: teacher[i] for i in rows if i in traj_of}
        opd_mask = opd_token_weights(masks, plan.has_skill)
        metrics["skillduet/opd_trajectory_ratio"] = plan.num_supervised / max(1, len(self._trajectories))
        fields = TensorDict({TEACHER_TOPK_IDS_KEY: nested(ids), TEACHER_TOPK_LOGPROBS_KEY: nested(logps),
                             OPD_MASK_KEY: nested(opd_mask)}, batch_size=len(teacher))
        return self._tq_put(batch, fields)


__all__ = ["TeacherPass"]
