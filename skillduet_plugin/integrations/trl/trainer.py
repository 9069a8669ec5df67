"""``SkillDuetGRPOTrainer``: GRPOTrainer with Local-skill OPD, Strength scoring and the Global in its rollouts.

A thin mixin over TRL's private hooks (the pattern TRL's own GRPO subclasses use):

- ``_generate_and_score_completions``: after TRL has rolled out and scored the batch, turn the rows into
  trajectories, extract Local skills (main process, one batched analyzer call), compute the teacher
  log-probs of each trajectory under its Local skill, and score the new skills with the rollout weights.
- ``_get_per_token_logps_and_entropies``: capture the student log-probs of TRL's own loss forward, so the OPD
  term needs no second student forward; with ``heldout="teacher"`` the same capture (and the teacher row of the
  OPD term) is what Strength reads: scoring finishes at the end of the step without a forward of its own.
- ``_compute_loss``: ``policy_loss_coef`` x TRL's loss plus ``opd_coef * L_OPD``, with L_OPD Eq. 1 (or its dense
  expectation, ``integrations.trl.dense_opd``) over the whole generation batch (its supervised count summed over
  micro-batches and ranks, as TRL counts tokens for its own loss).

All method logic lives in ``core/`` and ``skills/``; this module only moves tensors and calls the lifecycle.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Sequence

import torch
from accelerate.utils import broadcast_object_list, gather_object
from trl import GRPOTrainer
from trl.models.utils import disable_gradient_checkpointing
from trl.trainer.utils import RepeatSampler

from skillduet_plugin import envs
from skillduet_plugin.core.conversation import ChatTokenizer
from skillduet_plugin.core.logprobs import response_logprobs
from skillduet_plugin.core.opd import EXPECTED_STATS, GATE_STATS, opd_denominator, opd_loss
from skillduet_plugin.core.seeding import seeded_torch_rng
from skillduet_plugin.core.update_share import GradShare
from skillduet_plugin.envs.pool import EnvPool
from skillduet_plugin.integrations.trl.bank_steps import SkillBankSteps
from skillduet_plugin.integrations.trl.callback import SkillDuetCallback
from skillduet_plugin.integrations.trl.config import SkillDuetGRPOConfig
from skillduet_plugin.integrations.trl.data import ResumableRepeatSampler, make_env_reward, task_dataset
from skillduet_plugin.integrations.trl.dense_opd import DenseOPD, dense_key
from skillduet_plugin.integrations.trl.rollout import play_batch, rollout_output
from skillduet_plugin.integrations.trl.scoring import DeferredScores
from skillduet_plugin.integrations.trl.teacher import lean_teacher_logps, left_pad, trl_teacher_logps
from skillduet_plugin.integrations.trl.token_means import TokenMeans
from skillduet_plugin.integrations.trl.vllm_sync import install_cpu_weight_sync
from skillduet_plugin.rollout.collector import to_trajectory
from skillduet_plugin.rollout.teacher_check import check_metrics, check_wins, skills_by_task, teacher_check
from skillduet_plugin.skills.bank import BANK_FILENAME
from skillduet_plugin.skills.lifecycle import SkillLifecycle
from skillduet_plugin.skills.teacher_plan import TeacherPlan, plan_teacher
from skillduet_plugin.skills.teacher_scoring import paid_logprobs
from skillduet_plugin.skills.types import ExtractionResult, Skill, Trajectory


class SkillDuetMixin(SkillBankSteps):
    """SkillDuet on top of a GRPOTrainer-like class (``class T(SkillDuetMixin, GRPOTrainer)``).

    Args (besides the GRPOTrainer ones, passed through):
        args: a :class:`SkillDuetGRPOConfig`.
        reward_funcs: default: the environment reward minus the invalid-action penalty (:func:`make_env_reward`).
        train_dataset: default: every task of ``envs.make(args.env_name, split="train", **args.env_kwargs)``.
        lifecycle: a ``SkillLifecycle`` (default: built from ``args.skillduet`` with the bank at
            ``<skill_bank_dir>/skill_bank.sqlite``, written by the main process only). None is used for plain
            GRPO (``preset("grpo")``), which then runs no analyzer, teacher or scoring pass.
        env_pool: an ``EnvPool``-like object (default: ``EnvPool(env_name, num_workers=env_workers, ...)``).
        analyzer / synthesizer: LLM backends handed to the default lifecycle.
        rollout_kwargs: extra keywords for ``rollout.collector.run_episodes`` (``system_prompt``, custom prompt and
            action-projection functions for environments without ``envs.prompts`` entries).
    """

    def __init__(self, model: Any, args: SkillDuetGRPOConfig, *, reward_funcs: Any = None,
                 train_dataset: Any = None, lifecycle: Any = None, env_pool: Any = None, analyzer: Any = None,
                 synthesizer: Any = None, rollout_kwargs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if not isinstance(args, SkillDuetGRPOConfig):
            raise TypeError(f"args must be a SkillDuetGRPOConfig, got {type(args).__name__}")
        if kwargs.get("rollout_func") is not None or kwargs.get("environment_factory") is not None:
            raise ValueError("SkillDuetGRPOTrainer runs its own multi-turn rollout: do not pass rollout_func or "
                             "environment_factory")
        self.skillduet = args.skillduet_config
        self.rollout_kwargs = dict(rollout_kwargs or {})
        self.batch_rows: list[dict[str, Any]] | None = None
        self.rollout_history: list[dict[str, Any]] = []
        self.last_rollout: dict[str, Any] = {}
        self._env_pool = env_pool
        self._episodes: list = []
        self._opd_capture = False
        self._captured_logps: torch.Tensor | None = None
        self._deferred = DeferredScores()  # heldout="teacher": scores finished from the loss forwards
        self._dense = DenseOPD(self)  # opd_estimator choices / topk, and the choose-mode mechanism metrics
        self._grad_share = GradShare()  # opd/update_share over each optimizer step's micro-batches
        # the gate statistics, as token means over each logging interval (not means of micro-batch means)
        self._token_means = TokenMeans(("opd/loss", *GATE_STATS, *(dense_key(k) for k in EXPECTED_STATS)))
        if reward_funcs is None:
            reward_funcs = [make_env_reward(args.invalid_action_penalty, args.reward_scale)]
        if train_dataset is None:

            with envs.make(args.env_name, split="train", **args.env_kwargs) as env:
                train_dataset = task_dataset(env)
        super().__init__(model=model, reward_funcs=reward_funcs, args=args, train_dataset=train_dataset,
                         rollout_func=self._skillduet_rollout, **kwargs)
        self.chat = ChatTokenizer(self._tokenizer, args.chat_template_kwargs)
        if self.use_vllm:

            install_cpu_weight_sync(self.vllm_generation)
        if lifecycle is None and not self.skillduet.is_plain_grpo:

            lifecycle = SkillLifecycle(self.skillduet, Path(args.skill_bank_dir) / BANK_FILENAME,
                                       tokenizer=self._tokenizer, analyzer=analyzer, synthesizer=synthesizer,
                                       write=self.accelerator.is_main_process, env=args.env_name,
                                       chat_template_kwargs=args.chat_template_kwargs,
                                       policy_model=self.accelerator.unwrap_model(self.model))
        self.lifecycle = lifecycle
        if self.lifecycle is not None and self.skillduet.use_global and self._sharded_weights():
            raise NotImplementedError("skill scoring runs on the main process only and needs whole weights: use "
                                      "DDP or ZeRO-1/2 with the TRL adapter (or the verl adapter for sharded training)")
        self.add_callback(SkillDuetCallback(self))

    # ------------------------------------------------------------------ rollout
    @property
    def env_pool(self) -> Any:
        if self._env_pool is None:

            self._env_pool = EnvPool(self.args.env_name, num_workers=self.args.env_workers,
                                     env_kwargs=self.args.env_kwargs)
        return self._env_pool

    def _skillduet_rollout(self, prompts: list, trainer: Any) -> dict[str, Any]:
        rows = self.batch_rows
        if rows is None or len(rows) != len(prompts):
            raise RuntimeError("the SkillDuet rollout needs the batch's dataset rows (trainer.batch_rows); it is "
                               "called from SkillDuetMixin._generate_and_score_completions only")
        missing = [i for i, r in enumerate(rows) if "task_id" not in r]
        if missing:
            raise KeyError("dataset rows need a 'task_id' column: build the dataset with task_dataset()")
        task_ids = [str(r["task_id"]) for r in rows]
        self._episodes = play_batch(self, task_ids)
        mode = "train" if self.model.training else "eval"
        self.rollout_history.append({
            "mode": mode, "step": self.state.global_step + (1 if mode == "train" else 0),
            "task_ids": task_ids, "global_versions": [ep.global_version for ep in self._episodes]})
        self._log_rollout_metrics(mode)
        # What this process rolled out (and, below, distilled) last, row by row: for inspection, reports, tests.
        self.last_rollout = {"episodes": self._episodes, "trajectories": [],
                             "local_skills": [None] * len(self._episodes),
                             "teacher_prompt_ids": [list(ep.tokens.prompt_ids) for ep in self._episodes]}
        return rollout_output(self._episodes, self.chat.eos_token_id)

    def _log_rollout_metrics(self, mode: str) -> None:
        eps = self._episodes
        local = torch.tensor([[float(e.won), float(e.invalid_actions), float(e.num_turns), float(e.truncated),
                               float(e.error is not None)] for e in eps], dtype=torch.float32,
                             device=self.accelerator.device)
        means = self.accelerator.gather(local).mean(dim=0).tolist()
        for name, value in zip(("won", "invalid_actions", "turns", "truncated", "errors"), means):
            self._metrics[mode][f"env/{name}"].append(value)

    # ------------------------------------------------------------------ after TRL's rollout and scoring
    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        self.batch_rows = inputs
        output = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        cfg = self.skillduet
        if self.lifecycle is None or not cfg.extract_local:
            return output
        batch = output["completion_ids"].shape[0]
        device = output["completion_ids"].device
        # Skills made from validation rollouts never enter training: extraction and scoring run in train mode only.
        trajs: list[Trajectory] = []
        result = ExtractionResult()
        if mode == "train":
            step = self.state.global_step + 1
            trajs = self._trajectories(output, step)
            result = self._extract(trajs, step)
        plan = self._teacher_plan(trajs, result)  # in eval: no trajectories, every row keeps its student prompt
        if mode == "train" and self.args.teacher_check_samples:
            self._teacher_check(plan, step)
        has_skill = torch.tensor(plan.has_skill, dtype=torch.float32, device=device)
        if mode == "train":
            if cfg.use_global:
                self._score(result.skills, trajs, result.assignment)
                if cfg.scores_from_teacher_pass:
                    self._deferred.row_traj_ids = [t.traj_id for t in trajs]
                    output["skillduet_row"] = torch.arange(batch, device=device)
            self._log_skill_metrics(mode, result, has_skill)
        teacher_prompts = plan.contexts
        self.last_rollout.update(trajectories=trajs, local_skills=plan.skills, teacher_prompt_ids=teacher_prompts)
        if cfg.needs_teacher_pass:
            mask = output["completion_mask"].float()
            if "tool_mask" in output:
                mask = mask * output["tool_mask"].float()
            output["opd_mask"] = mask * has_skill[:, None]
            # Eq. 1's denominator over the whole generation batch: every slice and every rank (0-dim, so TRL
            # hands it unsplit to each micro-batch, as it does num_items_in_batch).
            output["opd_num_items"] = self.accelerator.gather(
                opd_denominator(output["opd_mask"], cfg.opd_agg).reshape(1)).sum()
            tp_ids, tp_mask = left_pad(teacher_prompts, self.chat.pad_token_id, device)
            if self.args.teacher_at == "loss":
                output["opd_teacher_prompt_ids"], output["opd_teacher_prompt_mask"] = tp_ids, tp_mask
            else:
                output["opd_teacher_logps"] = self._teacher_logps(
                    self.model, tp_ids, tp_mask, output["completion_ids"], output["completion_mask"], has_skill,
                    needed=output["opd_mask"])
        if (cfg.needs_teacher_pass and cfg.opd_estimator != "sampled") or self.args.action_selection == "choose":
            self._dense.prepare(output, teacher_prompts, has_skill, mode)  # with opd_coef=0: the metrics only
        return output

    def _teacher_plan(self, trajs: list[Trajectory], extraction: ExtractionResult) -> TeacherPlan:
        """The teacher context of each of this process's rows (``skills.teacher_plan``, as on verl)."""
        return plan_teacher([ep.tokens.prompt_ids for ep in self._episodes],
                            [ep.tokens.completion_ids for ep in self._episodes], list(enumerate(trajs)), extraction,
                            self.lifecycle, self.chat)

    def _teacher_check(self, plan: TeacherPlan, step: int) -> None:
        """Held-out episodes of this step's tasks played as the teacher and as the student with the rollout
        weights (``rollout.teacher_check``), never trained on. Sampled with the transformers policy from a generator
        seeded by the run's seed, the step and the rank inside a forked RNG, so training draws what it would
        draw without the check."""
        skills = skills_by_task([ep.task_id for ep in self._episodes], plan.skills)
        rank = self.accelerator.process_index
        with seeded_torch_rng(random.Random(f"teacher_check/{self.args.seed}/{step}/{rank}").getrandbits(63)):
            result = teacher_check(skills, lifecycle=self.lifecycle, samples=self.args.teacher_check_samples,
                                   play=lambda ids, fns: play_batch(self, ids, student_fns=fns, use_vllm=False))
        teacher, student, total = self.accelerator.gather(torch.tensor(
            [check_wins(result)], dtype=torch.float64, device=self.accelerator.device)).sum(dim=0).tolist()
        for key, value in check_metrics(teacher, student, total).items():
            self._metrics["train"][key].append(value)

    def _trajectories(self, output: dict[str, Any], step: int) -> list[Trajectory]:
        """This process's rows as trajectories, with their advantages and base log-probs when scoring needs them."""
        advantages = output["advantages"]
        if advantages.dim() > 1:
            advantages = advantages.mean(dim=1)
        base: Sequence[Sequence[float] | None] = [None] * len(self._episodes)
        if self.skillduet.use_global and (not self.skillduet.scores_from_teacher_pass
                                          or output.get("old_per_token_logps") is not None):
            base = self._base_logps(output)
        offset = self.accelerator.process_index * len(self._episodes)
        return [to_trajectory(ep, step=step, traj_id=f"{step}-{ep.task_id}-{offset + i}",
                              advantage=float(advantages[i]), base_logps=base[i])
                for i, ep in enumerate(self._episodes)]

    def _base_logps(self, output: dict[str, Any]) -> list[list[float]]:
        """log p(completion | student prompt) under the rollout weights: TRL's old log-probs when it kept them."""
        lengths = [len(ep.tokens.completion_ids) for ep in self._episodes]
        old = output.get("old_per_token_logps")
        if old is not None:
            return [old[i, :n].float().tolist() for i, n in enumerate(lengths)]
        contexts = [ep.tokens.prompt_ids for ep in self._episodes]
        responses = [ep.tokens.completion_ids for ep in self._episodes]
        values = self._logprob_fn()(contexts, responses)
        return [v.float().tolist() for v in values]

    def _extract(self, trajs: list[Trajectory], step: int) -> ExtractionResult:
        """Local skills for the whole step's trajectories: extracted on the main process, shared with all."""

        everyone = gather_object(trajs) if self.accelerator.num_processes > 1 else trajs
        self._step_trajectories = everyone
        holder: list[Any] = [None]
        if self.accelerator.is_main_process:
            holder[0] = self.lifecycle.extract(everyone, step)
        if self.accelerator.num_processes > 1:
            broadcast_object_list(holder, from_process=0)
        return holder[0]

    def _score(self, skills: Sequence[Skill], trajs: list[Trajectory], assignment: dict[str, str]) -> None:
        """Score the new skills with the rollout weights (main process). ``heldout="teacher"`` with OPD on: only
        the budgeted extra forwards run now, the rest comes from the loss forwards (``integrations.trl.scoring``);
        otherwise (pairwise estimator, or ``opd_coef=0``: no teacher pass) everything is computed now."""
        if not skills or not self.accelerator.is_main_process:
            return
        model = self.accelerator.unwrap_model(self.model)
        was_training = model.training
        model.eval()
        try:
            if self.skillduet.scores_from_teacher_pass:  # the rest comes from TRL's loss forwards

                plan = self.lifecycle.plan_scores(skills, self._step_trajectories, assignment)
                paid = paid_logprobs(plan, self._step_trajectories, self._logprob_fn())
                self._deferred.add_plan(skills, self._step_trajectories, plan, paid)
            else:
                self.lifecycle.score(skills, self._step_trajectories, self._logprob_fn(), assignment=assignment)
        finally:
            model.train(was_training)

    def _finish_scores(self) -> None:
        """Score the pending plans from the captured rows (all processes' rows gathered to the main one)."""
        if not self.skillduet.scores_from_teacher_pass:
            return
        gather = gather_object if self.accelerator.num_processes > 1 else None
        self._deferred.finish(self.lifecycle, gather)

    def _logprob_fn(self):
        """``logprob_fn(contexts, responses)`` on the unwrapped policy, no grad, temperature-scaled like TRL."""

        model = self.accelerator.unwrap_model(self.model)
        if hasattr(model, "get_base_model"):
            # PEFT injects its adapters into the base model in place: the base model computes with them active.
            model = model.get_base_model()

        def logprob_fn(contexts, responses) -> list[torch.Tensor]:
            with torch.no_grad(), self.accelerator.autocast(), \
                    disable_gradient_checkpointing(model, self.args.gradient_checkpointing_kwargs):
                return response_logprobs(model, contexts, responses, token_budget=self.args.logprob_token_budget,
                                         pad_token_id=self.chat.pad_token_id, temperature=self.args.temperature)

        return logprob_fn

    def _teacher_logps(self, model: Any, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                       completion_ids: torch.Tensor, completion_mask: torch.Tensor,
                       rows: torch.Tensor, needed: torch.Tensor | None = None) -> torch.Tensor:
        """Teacher log-probs ``(batch, completion_len)`` of the rows with ``rows > 0`` (the others stay 0):
        the lean pass (``teacher.lean_teacher_logps``), or TRL's own pass when the weights are sharded."""
        idx = torch.nonzero(rows > 0).flatten()
        if idx.numel() and self._sharded_weights():
            return self._teacher_logps_trl(model, prompt_ids, prompt_mask, completion_ids, completion_mask, idx)
        return lean_teacher_logps(self, model, prompt_ids, prompt_mask, completion_ids, completion_mask, idx, needed)

    def _teacher_logps_trl(self, model: Any, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                           completion_ids: torch.Tensor, completion_mask: torch.Tensor,
                           idx: torch.Tensor) -> torch.Tensor:
        return trl_teacher_logps(self, model, prompt_ids, prompt_mask, completion_ids, completion_mask, idx)

    def _sharded_weights(self) -> bool:
        """True under FSDP or DeepSpeed ZeRO-3, where a module's weights exist whole only inside its wrapper."""
        plugin = getattr(self.accelerator.state, "deepspeed_plugin", None)
        return bool(self.is_fsdp_enabled or (plugin is not None and getattr(plugin, "zero_stage", 0) == 3))

    def _log_skill_metrics(self, mode: str, result: ExtractionResult, has_skill: torch.Tensor) -> None:
        share = self.accelerator.gather(has_skill.mean()[None]).mean().item()
        self._metrics[mode]["opd/supervised_ratio"].append(share)
        if self.accelerator.is_main_process:
            self._metrics[mode]["skills/extracted"].append(float(len(result.skills)))
            for key, value in (self.lifecycle.metrics() or {}).items():
                if value is not None:
                    name = key if key.startswith("skills/") else f"skills/{key}"
                    self._metrics[mode][name].append(float(value))

    def log(self, logs: dict[str, float], *args: Any, **kwargs: Any) -> None:
        """TRL's ``log``, after writing the interval's gate statistics as one token mean each (``token_means``):
        TRL averages each ``_metrics`` list, which for values appended per micro-batch is a mean of means."""
        mode = "train" if self.model.training else "eval"  # as TRL's log tells the two apart
        gather = self._gather_sums if self.accelerator.num_processes > 1 else None
        for key, value in self._token_means.flush(mode, gather).items():
            self._metrics[mode][key] = [value]
        super().log(logs, *args, **kwargs)

    def _gather_sums(self, sums: torch.Tensor) -> torch.Tensor:
        return self.accelerator.gather(sums.to(self.accelerator.device)).cpu()

    # ------------------------------------------------------------------ loss
    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        result = super()._get_per_token_logps_and_entropies(model, input_ids, attention_mask, logits_to_keep,
                                                            *args, **kwargs)
        if self._opd_capture:
            self._captured_logps = result[0]
        return result

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        if "opd_mask" not in inputs:
            return super()._compute_loss(model, inputs)
        cfg = self.skillduet
        mode = "train" if self.model.training else "eval"
        mask = inputs["opd_mask"]
        teacher = inputs.get("opd_teacher_logps")
        if teacher is None:
            teacher = self._teacher_logps(model, inputs["opd_teacher_prompt_ids"], inputs["opd_teacher_prompt_mask"],
                                          inputs["completion_ids"], inputs["completion_mask"], mask.sum(dim=1),
                                          needed=mask)
        self._opd_capture, self._captured_logps = True, None
        try:
            loss = super()._compute_loss(model, inputs)
        finally:
            self._opd_capture = False
        student, self._captured_logps = self._captured_logps, None
        if student is None:
            raise RuntimeError("the student log-probs of TRL's loss forward were not captured: "
                               "GRPOTrainer._compute_loss no longer calls _get_per_token_logps_and_entropies")
        if mode == "train" and "skillduet_row" in inputs:
            self._deferred.capture(inputs["skillduet_row"], mask, student, teacher)
        _, stats = opd_loss(student.detach(), teacher, mask, beta=cfg.gate_beta, agg=cfg.opd_agg)
        # opd/loss weighs by Eq. 1's denominator (supervised tokens, or sequences under the seq-* modes), so the
        # interval's value is the loss over the whole batch however it was sliced
        self._token_means.add(mode, {"opd/loss": stats.pop("opd/loss")}, opd_denominator(mask, cfg.opd_agg).item())
        self._token_means.add(mode, stats, mask.sum().item())
        opd = cfg.opd_coef * self._dense.term(model, student, teacher, inputs, mode).to(loss.dtype)
        policy = cfg.policy_loss_coef * loss
        if self.args.opd_update_share and mode == "train" and torch.is_grad_enabled():
            # one value per optimizer step, from the gradients summed over its micro-batches
            share = self._grad_share.add(self.accelerator.unwrap_model(model), policy, opd,
                                         last=self.accelerator.sync_gradients)
            for key, value in share.items():
                self._metrics[mode][key].append(value)
        return policy + opd


class SkillDuetGRPOTrainer(SkillDuetMixin, GRPOTrainer):
    """TRL's GRPOTrainer with SkillDuet (see :class:`SkillDuetMixin` for the added arguments)."""

    def _get_train_sampler(self, dataset: Any = None) -> Any:
        """TRL's sampler with its settings, made to keep the task order across a resume."""
        sampler = super()._get_train_sampler(dataset)
        return ResumableRepeatSampler.of(sampler) if type(sampler) is RepeatSampler else sampler
