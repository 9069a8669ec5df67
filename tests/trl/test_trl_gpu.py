"""CUDA checks of the adapter (skipped on CPU machines): bf16 autocast, device placement of teacher and scoring."""

from __future__ import annotations

import math

import pytest
import torch
from trl_helpers import group_rows


@pytest.mark.gpu
def test_teacher_pass_and_scoring_run_on_cuda_in_bf16(make_trainer):
    trainer = make_trainer(bf16=True, skillduet={"opd_coef": 0.5})
    assert next(trainer.model.parameters()).device.type == "cuda"
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    inputs = trainer._generate_and_score_completions(group_rows(trainer))
    teacher, mask = inputs["opd_teacher_logps"], inputs["opd_mask"]
    assert teacher.device.type == "cuda" and mask.device.type == "cuda"
    assert torch.isfinite(teacher).all() and mask.sum() > 0
    assert (teacher[mask.bool()] <= 0).all()

    ep = trainer.last_rollout["episodes"][0]
    fn = trainer._logprob_fn()
    (base,) = fn([ep.tokens.prompt_ids], [ep.tokens.completion_ids])
    assert base.device.type == "cuda" and base.dtype == torch.float32 and torch.isfinite(base).all()

    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    grads = [p.grad for p in trainer.model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    trainer.log({})
    assert math.isfinite(trainer.state.log_history[-1]["opd/loss"])


@pytest.mark.gpu
def test_two_bf16_training_steps_on_cuda(make_trainer):
    trainer = make_trainer(bf16=True, max_steps=2, skillduet={"consolidation_interval": 1, "opd_coef": 0.2})
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "opd/loss" in entry]
    assert len(logs) == 2 and all(math.isfinite(e["opd/loss"]) and math.isfinite(e["loss"]) for e in logs)
    assert trainer.lifecycle.bank.history()  # consolidated after each step (interval 1)
