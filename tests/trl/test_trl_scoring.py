"""Strength on TRL from the forwards the step already pays for (``heldout="teacher"``): the teacher rows of the
OPD term and TRL's own loss forward, checked against an independent computation with the rollout weights."""

from __future__ import annotations

import copy

import pytest
import torch
from trl_helpers import group_rows

import skillduet_plugin.integrations.trl.trainer as trainer_module
from skillduet_plugin.core.conversation import ChatTokenizer


def _plain_logps(model, prompt, completion, temperature):
    ids = torch.tensor([list(prompt) + list(completion)])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1].float() / temperature
    return logits.log_softmax(-1).gather(-1, torch.tensor(list(completion))[:, None]).squeeze(-1)


def test_strength_from_the_teacher_pass_and_loss_forward_needs_no_scoring_forward(make_trainer, monkeypatch):
    trainer = make_trainer(skillduet={"opd_coef": 0.5, "heldout": "teacher", "consolidation_interval": 100})
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    make_trajs = trainer._trajectories

    def one_success(output, step):  # a mixed group: one shared skill, two free held-out rows
        trajs = make_trajs(output, step)
        for i, t in enumerate(trajs):
            t.success, t.reward = i == 0, float(i == 0)
        return trajs

    monkeypatch.setattr(trainer, "_trajectories", one_success)
    forwards = []
    real = trainer_module.response_logprobs
    monkeypatch.setattr(trainer_module, "response_logprobs",
                        lambda *a, **k: forwards.append(len(a[1])) or real(*a, **k))
    rollout_model = copy.deepcopy(trainer.model).eval()
    torch.manual_seed(3)
    inputs = trainer._generate_and_score_completions(group_rows(trainer, 3))
    assert "skillduet_row" in inputs and trainer._deferred.pending
    trainer._compute_loss(trainer.model, inputs)
    finished = []
    finish = trainer.lifecycle.finish_scores
    monkeypatch.setattr(trainer.lifecycle, "finish_scores", lambda *a, **k: finished.append(finish(*a, **k)))
    trainer.skillduet_end_step(1)
    assert forwards == []  # no base recomputation, no skill-conditioned scoring forward

    rollout = trainer.last_rollout
    (skill,) = {s.skill_id: s for s in rollout["local_skills"] if s is not None}.values()
    assert skill.kind == "shared"
    chat = ChatTokenizer(trainer.processing_class)
    shifts = {}
    for ep, traj in zip(rollout["episodes"], rollout["trajectories"]):
        teacher_prompt = chat.prompt_ids(trainer.lifecycle.teacher_messages(
            ep.prompt_messages, task=ep.task, scope=ep.scope, local_skill=skill))
        t = _plain_logps(rollout_model, teacher_prompt, ep.tokens.completion_ids, trainer.args.temperature)
        s = _plain_logps(rollout_model, ep.tokens.prompt_ids, ep.tokens.completion_ids, trainer.args.temperature)
        m = torch.tensor(ep.tokens.completion_mask, dtype=torch.float32)
        shifts[traj.traj_id] = float(((t - s) * m).sum() / m.sum())
    all_rows = sum(abs(v) for v in shifts.values()) / len(shifts)
    shifts = {k: v for k, v in shifts.items() if k not in skill.source_traj_ids}
    assert len(shifts) == 2
    got = finished[0][skill.skill_id]
    assert got["n_heldout"] == 2
    assert got["strength"] == pytest.approx(sum(abs(v) for v in shifts.values()) / 2, abs=2e-5)
    stored = {c.skill_id: c for c in trainer.lifecycle.bank.candidates()}[skill.skill_id]
    assert stored.scores["strength"] == pytest.approx(got["strength"])
    # negative control: counting the source rows (which produced the skill) gives a different value
    assert abs(all_rows - got["strength"]) > 1e-4
