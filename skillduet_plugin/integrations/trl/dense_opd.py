"""The dense OPD estimators on TRL (``opd_estimator`` = ``choices`` | ``topk``) and the choose-mode mechanism metrics.

At generation (rollout weights, no grad) the teacher's distributions are computed once per batch row with a Local
skill: per decision turn over its admissible actions (``choices``), or its top-k tokens per completion position
(``topk``, as ``opd_topk_logps`` / ``opd_topk_ids`` batch tensors that TRL splits by rows like its own). In the loss
the student's distributions over the same alternatives are computed with grad (one extra student forward over the
micro-batch's supervised rows) and ``core.opd.opd_expected`` gives the term; this module only moves tensors.

In choose mode every OPD run also logs ``opd/choice/*`` each step (``core.opd.expected_stats`` over the decision
turns of the rows with a Local skill, student and teacher at the rollout weights): the share of turns where the
teacher's first choice is not the student's, and each model's probability of the teacher's first choice.
"""

from __future__ import annotations

from typing import Any

import torch

from skillduet_plugin.core.logprobs import response_logprobs_at, response_topk
from skillduet_plugin.core.opd import expected_stats, opd_expected, opd_numerator, opd_per_token
from skillduet_plugin.rollout.choice_terms import decision_turns, pad_turns, turn_choice_logps


class DenseOPD:
    """Per generation batch: the rows' teacher distributions; per micro-batch: the dense OPD numerator."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.choice_rows: dict[int, tuple[list[int], list[int], list, list[torch.Tensor]]] = {}

    @property
    def cfg(self) -> Any:
        return self.trainer.skillduet

    def _policy(self) -> Any:
        return self.trainer.accelerator.unwrap_model(self.trainer.model)

    # ------------------------------------------------------------------ at generation
    def prepare(self, output: dict[str, Any], teacher_prompts: list[list[int]], has_skill: torch.Tensor,
                mode: str) -> None:
        """Teacher distributions of the rows with a Local skill (and the choose-mode metrics, also measured without
        OPD when Local skills are extracted: ``opd_coef=0`` with ``extract_local``)."""
        trainer, cfg = self.trainer, self.cfg
        rows = [i for i, ok in enumerate(has_skill.tolist()) if ok]
        self.choice_rows = {}
        device = output["completion_ids"].device
        output["opd_row"] = torch.arange(output["completion_ids"].shape[0], device=device)
        if trainer.args.action_selection == "choose":
            decisions = self._choice_teacher(rows, teacher_prompts, mode)
            if cfg.needs_teacher_pass and cfg.opd_estimator == "choices":
                output["opd_dense_items"] = trainer.accelerator.gather(
                    torch.tensor([float(decisions)], device=device)).sum()
        if cfg.needs_teacher_pass and cfg.opd_estimator == "topk":
            output["opd_topk_logps"], output["opd_topk_ids"] = self._topk_teacher(rows, teacher_prompts, output)

    def _choice_teacher(self, rows: list[int], teacher_prompts: list[list[int]], mode: str) -> int:
        """Teacher (and, for the metrics, student) choice distributions of every decision turn; returns the
        number of decision turns (Eq. 1's count for ``choices``)."""
        trainer = self.trainer
        policy, tau = self._policy(), trainer.args.temperature
        students, teachers = [], []
        with torch.no_grad():
            for i in rows:
                ep = trainer._episodes[i]
                turns = decision_turns(ep.choices)
                if not turns:
                    continue
                completion = list(ep.tokens.completion_ids)
                t = turn_choice_logps(policy, teacher_prompts[i], completion, turns, temperature=tau)
                s = turn_choice_logps(policy, ep.tokens.prompt_ids, completion, turns, temperature=tau)
                self.choice_rows[i] = (list(ep.tokens.prompt_ids), completion, turns, [x.cpu() for x in t])
                students.extend(s)
                teachers.extend(t)
        if students:
            s_pad, valid = pad_turns(students)
            t_pad, _ = pad_turns(teachers)
            stats = expected_stats(s_pad, t_pad, torch.ones(s_pad.shape[0]), self.cfg.gate_beta, valid)
            for key, value in stats.items():
                trainer._metrics[mode][key.replace("opd/", "opd/choice/")].append(value)
        return len(students)

    def _topk_teacher(self, rows: list[int], teacher_prompts: list[list[int]],
                      output: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(batch, completion_len, k)`` teacher top-k log-probs and ids (zeros on rows without a skill)."""
        trainer, k = self.trainer, self.cfg.opd_topk
        completion_ids, lengths = output["completion_ids"], output["completion_mask"].sum(dim=1).tolist()
        shape = (*completion_ids.shape, k)
        logps = torch.zeros(shape, dtype=torch.float32, device=completion_ids.device)
        ids = torch.zeros(shape, dtype=torch.long, device=completion_ids.device)
        if rows:
            responses = [completion_ids[i, :int(lengths[i])].tolist() for i in rows]
            with torch.no_grad():
                top = response_topk(self._policy(), [teacher_prompts[i] for i in rows], responses, k,
                                    token_budget=trainer.args.logprob_token_budget,
                                    pad_token_id=trainer.chat.pad_token_id, temperature=trainer.args.temperature)
            for i, (values, index) in zip(rows, top):
                n = values.shape[0]
                logps[i, :n, :values.shape[1]] = values
                ids[i, :n, :index.shape[1]] = index
        return logps, ids

    # ------------------------------------------------------------------ in the loss
    def term(self, model: Any, student: torch.Tensor, teacher: torch.Tensor, inputs: dict[str, Any],
             mode: str) -> torch.Tensor:
        """This micro-batch's share of Eq. 1 over the whole generation batch (``opd_estimator=sampled``: the
        sampled tokens' ``student``/``teacher`` log-probs), or of its dense expectation (``choices``: over the
        batch's decision turns; ``topk``: over its supervised tokens).

        Normalised the way TRL normalises its own token-level loss (``dapo``): by the generation batch's
        supervised count summed over slices and ranks, rescaled to one accumulation window. Summed over the
        micro-batches of an optimizer step and averaged over ranks (DDP), the gradient is exactly that of
        Eq. 1 over the batch, however the batch is split.
        """
        cfg, trainer = self.cfg, self.trainer
        if cfg.opd_estimator == "sampled":
            per_token, _ = opd_per_token(student, teacher, cfg.gate_beta)
            numerator = opd_numerator(per_token, inputs["opd_mask"], cfg.opd_agg)
        elif cfg.opd_estimator == "choices":
            numerator = self._choices(trainer.accelerator.unwrap_model(model), inputs, mode)
        else:
            numerator = self._topk(trainer.accelerator.unwrap_model(model), inputs, mode)
        count = inputs["opd_dense_items"] if cfg.opd_estimator == "choices" else inputs["opd_num_items"]
        total = count.to(numerator.device, numerator.dtype).clamp_min(1.0)
        normalizer = total / trainer.accelerator.num_processes
        if mode == "train":  # an eval batch is neither split across steps nor accumulated
            normalizer = normalizer * trainer.current_gradient_accumulation_steps / trainer.args.steps_per_generation
        return numerator / normalizer

    def _choices(self, policy: Any, inputs: dict[str, Any], mode: str) -> torch.Tensor:
        tau, students, teachers = self.trainer.args.temperature, [], []
        for row in inputs["opd_row"].tolist():
            if row not in self.choice_rows:
                continue
            prompt, completion, turns, teacher = self.choice_rows[row]
            students.extend(turn_choice_logps(policy, prompt, completion, turns, temperature=tau))
            teachers.extend(teacher)
        device = inputs["completion_ids"].device
        if not students:
            return _zero_with_graph(policy, device)
        s_pad, valid = pad_turns(students, device)
        t_pad, _ = pad_turns([t.to(device) for t in teachers], device)
        per_turn, _ = opd_expected(s_pad, t_pad, self.cfg.gate_beta, valid)
        self._log(expected_stats(s_pad, t_pad, torch.ones(s_pad.shape[0]), self.cfg.gate_beta, valid), mode,
                  s_pad.shape[0])
        return per_turn.sum()

    def _topk(self, policy: Any, inputs: dict[str, Any], mode: str) -> torch.Tensor:
        mask = inputs["opd_mask"]
        rows = torch.nonzero(mask.sum(dim=1) > 0).flatten().tolist()
        device = mask.device
        if not rows:
            return _zero_with_graph(policy, device)
        t_logps, t_ids = inputs["opd_topk_logps"], inputs["opd_topk_ids"]
        lengths = inputs["completion_mask"].sum(dim=1).tolist()
        p_ids, p_mask = inputs["prompt_ids"], inputs["prompt_mask"].bool()
        contexts = [p_ids[i][p_mask[i]].tolist() for i in rows]
        responses = [inputs["completion_ids"][i, :int(lengths[i])].tolist() for i in rows]
        at = response_logprobs_at(policy, contexts, responses, [t_ids[i, :len(r)] for i, r in zip(rows, responses)],
                                  token_budget=self.trainer.args.logprob_token_budget,
                                  pad_token_id=self.trainer.chat.pad_token_id,
                                  temperature=self.trainer.args.temperature)
        student = torch.zeros(t_logps.shape, dtype=torch.float32, device=device)
        for i, values in zip(rows, at):
            student[i, :values.shape[0]] = values
        per_position, _ = opd_expected(student, t_logps, self.cfg.gate_beta)
        self._log(expected_stats(student[rows], t_logps[rows], mask[rows], self.cfg.gate_beta), mode,
                  mask[rows].sum().item())
        return opd_numerator(per_position, mask, self.cfg.opd_agg)

    def _log(self, stats: dict[str, float], mode: str, weight: float) -> None:
        """``opd/dense/*``: means over this micro-batch's decision turns (``choices``) or supervised tokens
        (``topk``), weighted by their count into the logging interval's mean (``token_means``)."""
        self.trainer._token_means.add(mode, {dense_key(k): v for k, v in stats.items()}, weight)


def dense_key(key: str) -> str:
    """The name under which a dense estimator's statistic ``opd/x`` is logged: ``opd/dense/x``."""
    return key.replace("opd/", "opd/dense/", 1)


def _zero_with_graph(policy: Any, device: Any) -> torch.Tensor:
    """0 that still backpropagates (every parameter gets a zero gradient), so DDP ranks stay in step."""
    return sum(p.sum() * 0.0 for p in policy.parameters() if p.requires_grad).to(device)


__all__ = ["DenseOPD"]
