"""The ``skillduet_sync`` trainer: verl's synchronous V1 PPO trainer plus the SkillDuet step.

Per step, on top of ``PPOTrainerSync``: after the old log-probs, the step's trajectories go to Local extraction and
every trajectory with a Local skill gets teacher log-probs (same response tokens, skill-augmented prompt, current
actor weights); after the advantages, the Local skills are scored on held-out trajectories (``heldout="teacher"``:
from the teacher log-probs just computed and the old log-probs, plus budgeted extra rows only where a candidate has
none); the actor trains with the SkillDuet engine loss (installed once at init); after the rollout weights are
synced, the lifecycle consolidates every ``consolidation_interval`` steps and the new Globals are published
cluster-wide.
The skill bank is checkpointed inside verl's ``global_step_<k>`` folders and restored on resume.

``skillduet.teacher_logprobs=rollout`` computes the teacher and extra scoring rows with prefill requests to the
rollout servers (``server_logprobs.py``) instead of the actor's FSDP forward: the replicas serve theta_old after
every sync. The sync trainer sleeps the replicas right after sampling, so with the option on that sleep is
deferred to the end of the advantage phase (after scoring). Each task group is extracted and its teacher prefills
are sent at the replay-buffer poll where the group is complete, while the rest of the rollout runs
(``groups.py``); a group that completes at the poll where sampling ends is handled at that poll.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any, ContextManager

import ray
import torch
import transfer_queue as tq
from tensordict import TensorDict
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.debug import marked_timer

from skillduet_plugin.config import ConfigError
from skillduet_plugin.core.conversation import ChatTokenizer
from skillduet_plugin.core.shared_prefix import group_rows
from skillduet_plugin.integrations.verl import TRAINER_NAME
from skillduet_plugin.integrations.verl.batch import (build_trajectories, non_tensor_list, skillduet_record,
                                                      tensor_rows, trajectory_advantages)
from skillduet_plugin.integrations.verl.checkpoints import CHECKPOINT_SUBDIR, STATE_FILE, SkillBankCheckpoints
from skillduet_plugin.integrations.verl.groups import (GroupPrefetch, extract_step, keys_by_task, start_groups,
                                                       terminal_uids, uid_of, watch_replay_buffer)
from skillduet_plugin.integrations.verl.loss import make_loss_fn
from skillduet_plugin.integrations.verl.server_logprobs import BackgroundLoop, gather_prefills, strength_gap
from skillduet_plugin.integrations.verl.settings import settings_from_trainer_config
from skillduet_plugin.integrations.verl.skill_server import create_server, global_to_dict
from skillduet_plugin.integrations.verl.teacher_check import TeacherCheck
from skillduet_plugin.integrations.verl.teacher_pass import TeacherPass
from skillduet_plugin.integrations.verl.tracking import tracker_from_verl
from skillduet_plugin.skills.lifecycle import SkillLifecycle
from skillduet_plugin.skills.types import ExtractionResult

logger = logging.getLogger(__name__)


@register_trainer(TRAINER_NAME)
class SkillDuetTrainer(SkillBankCheckpoints, TeacherPass, TeacherCheck, PPOTrainerSync):
    """``trainer.v1.trainer_mode=skillduet_sync``; reads the ``skillduet:`` config section."""

    def __init__(self, config: Any) -> None:
        self.skillduet = settings_from_trainer_config(config)
        temperature = float(config.actor_rollout_ref.rollout.temperature)
        if self.skillduet.teacher_logprobs != "actor" and temperature != 1.0:
            raise ConfigError(f"skillduet.teacher_logprobs={self.skillduet.teacher_logprobs} needs "
                              f"actor_rollout_ref.rollout.temperature=1.0 (got {temperature}): rollout servers "
                              "return prompt log-probs of the raw logits; set skillduet.teacher_logprobs=actor")
        super().__init__(config)
        self.lifecycle: Any = None
        self.chat: Any = None
        self.global_server: Any = None
        self._extraction = ExtractionResult()
        self._trajectories: list = []
        self._teacher_rows: dict[str, torch.Tensor] = {}  # traj_id -> teacher log-probs (free scoring rows)
        self._scopes: set[str] = set()
        self._checkpoint_folder: str | None = None
        self._server_client: Any = None
        self._sleep_deferred = False
        self._check: dict[str, float] = {}  # teacher_logprobs=compare: the step's rollout-vs-actor gaps
        self._reference_rows: dict[str, torch.Tensor] = {}
        self._groups = GroupPrefetch()  # per-group extraction + teacher prefills during the rollout
        self._prefill_loop = BackgroundLoop()
        self._group_work: list = []

    # ------------------------------------------------------------------ seams (overridden in tests)
    def _tq_get(self, batch: Any, fields: list[str]) -> TensorDict:

        return tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)

    def _tq_put(self, batch: Any, fields: TensorDict) -> Any:

        return tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=fields)

    def _tq_get_keys(self, keys: list[str], fields: list[str]) -> TensorDict:

        return tq.kv_batch_get(keys=keys, partition_id="train", select_fields=fields)

    def _make_lifecycle(self, bank_path: str) -> Any:

        template_kwargs = dict(self.config.data.get("apply_chat_template_kwargs", None) or {})
        return SkillLifecycle(self.skillduet.method, bank_path, tokenizer=self.tokenizer,
                              env=self.skillduet.env.name, chat_template_kwargs=template_kwargs)

    def _timer(self, name: str) -> ContextManager:
        """verl's phase timer: the phase shows as ``timing_s/<name>`` in the step's metrics."""
        timing = getattr(self, "timing_raw", None)
        if timing is None:
            return contextlib.nullcontext()

        return marked_timer(name, timing)

    # ------------------------------------------------------------------ set-up
    def _ensure_lifecycle(self) -> None:
        if self.lifecycle is not None:
            return

        template_kwargs = dict(self.config.data.get("apply_chat_template_kwargs", None) or {})
        self.chat = ChatTokenizer(self.tokenizer, template_kwargs)
        path = self.skillduet.resolved_bank_path(self.config.trainer.default_local_dir)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.lifecycle = self._make_lifecycle(path)

    def on_init_end(self) -> None:
        super().on_init_end()  # rollout weights after a checkpoint load
        self._ensure_lifecycle()
        method = self.skillduet.method

        actor_config = omega_conf_to_dataclass(self.config.actor_rollout_ref.actor)
        self.actor_rollout_wg.set_loss_fn(make_loss_fn(
            actor_config, opd_coef=method.opd_coef, gate_beta=method.gate_beta,
            policy_loss_coef=method.policy_loss_coef, estimator=method.opd_estimator, topk=method.opd_topk))
        self.global_server = create_server(self.skillduet.global_server)
        self._publish_bank_globals()

    # ------------------------------------------------------------------ per-group work during the rollout
    def _prefetching(self) -> bool:
        """Teacher prefills per task group as soon as it is complete: only with the rollout servers as teacher."""
        method = self.skillduet.method
        return self.skillduet.teacher_logprobs != "actor" and method.needs_teacher_pass

    def _submit_batch_to_rollout(self, batch: Any) -> int:
        if self._prefetching():
            uids = non_tensor_list(batch["uid"])
            infos = non_tensor_list(batch.get("extra_info", None)) or [None] * len(uids)
            self._groups.submitted(uids, [i.get("task_id") if isinstance(i, dict) else None for i in infos],
                                   self.global_steps)
        return super()._submit_batch_to_rollout(batch)

    def _build_replay_buffer(self) -> Any:
        buffer = super()._build_replay_buffer()
        if self.skillduet.replay_poll_interval_s is not None and hasattr(buffer, "poll_interval"):
            # verl polls the rollout every 2 s (not a config key): a step's rollout time is rounded up to that
            buffer.poll_interval = float(self.skillduet.replay_poll_interval_s)
        return watch_replay_buffer(buffer, self._on_rollout_poll)

    def _on_rollout_poll(self, buffer: Any) -> None:
        """Every poll of verl's replay buffer: start the work of each task group that just became complete."""
        if not self._prefetching() or self.lifecycle is None:
            return
        ready = self._groups.ready(terminal_uids(buffer), self.global_steps)
        tasks, uids = [task for task, _ in ready], set().union(*(task_uids for _, task_uids in ready))
        keys = sorted(k for k in buffer.partitions.get("train", {}) if uid_of(k) in uids)
        if not keys:  # none ready, or every session failed (verl evicts and may refill such a group)
            return
        try:
            data = self._tq_get_keys(keys, ["prompts", "responses", "response_mask", "extra_fields"])
            self._groups.add(start_groups(tasks, keys, data, lifecycle=self.lifecycle, chat=self.chat,
                                          step=self.global_steps, submit=self._submit_prefills))
        except Exception:  # noqa: BLE001 - never break verl's sampling: the batch path redoes these groups
            logger.warning("skillduet: per-group work of %s failed; done with the batch", tasks, exc_info=True)
            self._groups.started.update(tasks)

    def _submit_prefills(self, contexts: list[list[int]], responses: list[list[int]]):
        return self._prefill_loop.submit(gather_prefills(self._client(), contexts, responses))

    def _extract_step(self, step: int) -> ExtractionResult:
        """The step's Local skills: the task groups analysed during the rollout plus the rest, merged."""
        trajectories = [t for _, t in self._trajectories]
        self._group_work = self._groups.take(keys_by_task(trajectories), step) if self._prefetching() else []
        return extract_step(self.lifecycle, trajectories, self._group_work, step)

    # ------------------------------------------------------------------ the step
    def on_sample_end(self) -> None:
        if getattr(self.skillduet, "teacher_logprobs", "actor") == "actor" and not self._teacher_check_on():
            super().on_sample_end()
        else:  # the rollout servers answer the prefills / the teacher check: sleep them after scoring
            self._sleep_deferred = True

    def _release_rollout(self) -> None:
        if getattr(self, "_sleep_deferred", False):
            self._sleep_deferred = False
            super().on_sample_end()

    def _balance_batch(self, batch: Any, metrics: dict, *args: Any, **kwargs: Any) -> Any:
        """verl's balancing over data-parallel ranks; with ``shared_prefix_forward`` each task group's rows are
        then put side by side within a rank's share (``core.shared_prefix.group_rows``), so that the actor's
        micro-batches hold whole groups whose shared prompt the packed forward computes once."""
        batch = super()._balance_batch(batch, metrics, *args, **kwargs)
        if self.skillduet.shared_prefix_forward:
            batch.reorder(group_rows([uid_of(k) for k in batch.keys], self._actor_dp_size()))
        return batch

    def _compute_old_log_prob(self, batch: Any, metrics: dict) -> Any:
        batch = super()._compute_old_log_prob(batch, metrics)
        method = self.skillduet.method
        self._check = {}
        self._extraction, self._trajectories, self._teacher_rows = ExtractionResult(), [], {}
        if not method.extract_local:
            return batch
        data = self._tq_get(batch, ["prompts", "responses", "response_mask", "old_log_probs", "extra_fields"])
        prompts, responses = tensor_rows(data["prompts"]), tensor_rows(data["responses"])
        masks, old = tensor_rows(data["response_mask"]), tensor_rows(data["old_log_probs"])
        records = [skillduet_record(x) for x in non_tensor_list(data["extra_fields"])]
        padding = [bool(tag.get("is_padding", False)) for tag in batch.tags]
        self._trajectories = build_trajectories(batch.keys, records, prompts, responses, masks, old,
                                                step=self.global_steps, skip=padding)
        self._scopes.update(t.scope for _, t in self._trajectories)
        with self._timer("skillduet_extract"):
            self._extraction = self._extract_step(self.global_steps)
        metrics["skillduet/groups_prefetched"] = sum(len(work.task_ids) for work in self._group_work)
        metrics["skillduet/groups_prefetched_early"] = self._groups.last_early  # before sampling's final poll
        metrics["skillduet/local_skills"] = len(self._extraction.skills)
        metrics["skillduet/extraction_failures"] = self._extraction.failures
        metrics["skillduet/trajectories"] = len(self._trajectories)
        versions = [t.global_version for _, t in self._trajectories if t.global_version is not None]
        metrics["skillduet/rollout_global_version"] = max(versions) if versions else -1  # newest in the prompts
        if method.needs_teacher_pass or self._teacher_check_on():
            plan = self._teacher_plan(prompts, responses)
            if method.needs_teacher_pass:
                with self._timer("skillduet_teacher"):
                    batch = self._put_teacher_logprobs(batch, plan, masks, metrics)
            if self._teacher_check_on():
                splits = {t.task_id: str((records[row] or {}).get("split", "train")) for row, t in self._trajectories}
                with self._timer("skillduet_teacher_check"):
                    self._teacher_check(plan, splits, metrics)
        return batch

    def _compute_advantage(self, batch: Any, metrics: dict) -> Any:
        try:
            return self._advantage_and_scores(batch, metrics)
        finally:
            self._release_rollout()
            metrics.update({f"skillduet/check/{k}": v for k, v in getattr(self, "_check", {}).items()})

    def _advantage_and_scores(self, batch: Any, metrics: dict) -> Any:
        batch = super()._compute_advantage(batch, metrics)
        if not self._extraction.skills or not self._trajectories:
            return batch
        data = self._tq_get(batch, ["advantages", "response_mask"])
        advantages = trajectory_advantages(tensor_rows(data["advantages"]), tensor_rows(data["response_mask"]))
        for row, traj in self._trajectories:
            traj.advantage = advantages[row]
        # Scoring runs before the actor update: Delta is measured under the weights that rolled out.
        trajectories = [t for _, t in self._trajectories]
        if self.skillduet.teacher_logprobs == "compare":  # Strength from the actor's rows, not recorded
            reference = self.lifecycle.score(self._extraction.skills, trajectories, self._actor_logprobs,
                                             teacher_logps=self._reference_rows,
                                             assignment=self._extraction.assignment, record=False)
        with self._timer("skillduet_score"):
            scores = self.lifecycle.score(self._extraction.skills, trajectories, self._logprob_fn,
                                          teacher_logps=self._teacher_rows, assignment=self._extraction.assignment)
        if self.skillduet.teacher_logprobs == "compare":
            self._check.update(strength_gap(scores, reference))
        return batch

    def on_train_begin(self) -> None:
        super().on_train_begin()
        self._ensure_lifecycle()  # the skills go to the loggers verl's fit() just made (trainer.logger)
        self.lifecycle.tracker = tracker_from_verl(getattr(self, "logger", None))

    def on_step_end(self) -> None:
        super().on_step_end()  # rollout replicas get the new weights first
        with self._timer("skillduet_end_step"):  # consolidation, publication, bank snapshot
            self.lifecycle.end_step(self.global_steps)
            self._publish_globals()
            if self._checkpoint_folder is not None:
                self._snapshot_skill_bank(self._checkpoint_folder, end_step_done=True)
                self._checkpoint_folder = None
        pending = dict(getattr(self, "_pending_sync_metrics", None) or {})
        pending.update({f"skillduet/{k}": v for k, v in (self.lifecycle.metrics() or {}).items()})
        self._pending_sync_metrics = pending

    def _publish_bank_globals(self) -> None:
        """At start-up, every scope the bank already knows: a bank that holds Globals (a resumed run's, or one an
        earlier run filled, given as ``skillduet.bank_path``) serves them from the first rollout on, not only
        after a task of that scope was played and a step ended."""
        self._scopes.update(self.lifecycle.bank.scopes())
        self._publish_globals()

    def _publish_globals(self) -> None:
        if self.global_server is None or not self.skillduet.method.use_global or not self._scopes:
            return
        globals_by_scope = {s: global_to_dict(self.lifecycle.global_for(s)) for s in sorted(self._scopes)}
        self._send_globals(globals_by_scope)

    def _send_globals(self, globals_by_scope: dict) -> None:
        ray.get(self.global_server.publish.remote(globals_by_scope, int(self.global_steps)))


__all__ = ["CHECKPOINT_SUBDIR", "STATE_FILE", "SkillDuetTrainer"]
