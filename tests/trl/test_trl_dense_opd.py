"""The dense OPD estimators on TRL (``opd_estimator`` choices / topk): the adapter's gradient is GRPO's plus lambda
times an independent computation (plain forwards, one candidate or one sequence at a time, own gate and mean)."""

from __future__ import annotations

import pytest
import torch
from trl import GRPOTrainer
from trl_helpers import group_rows

from skillduet_plugin.core.conversation import ChatTokenizer


def _batch(trainer, task_index=3):
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    torch.manual_seed(3)
    inputs = trainer._generate_and_score_completions(group_rows(trainer, task_index))
    inputs["advantages"] = torch.tensor([1.0, -0.5, 0.25, -0.75])
    return inputs


def _grads(model, loss):
    model.zero_grad(set_to_none=True)
    loss.backward()
    return [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]


def _teacher_prompt(trainer, ep, skill):
    chat = ChatTokenizer(trainer.processing_class)
    return chat.prompt_ids(trainer.lifecycle.teacher_messages(ep.prompt_messages, task=ep.task, scope=ep.scope,
                                                              local_skill=skill))


def _sequence_logp(model, context, tokens):
    """sum log p(tokens | context) by a plain forward over context + tokens."""
    ids = torch.tensor([list(context) + list(tokens)])
    logits = model(input_ids=ids).logits[0, len(context) - 1:-1].float()
    return logits.log_softmax(-1).gather(-1, torch.tensor(list(tokens))[:, None]).sum()


def _reference_choices(trainer, beta):
    """Sum over decision turns of sum_a sg[p_s(a)] g_a (sg[t_a] - s_a), divided by the number of decision turns,
    with each candidate scored by its own plain forward."""
    model, rollout, tau = trainer.model, trainer.last_rollout, trainer.args.temperature
    terms, deciding, student_top = [], [], []
    for ep, skill in zip(rollout["episodes"], rollout["local_skills"]):
        if skill is None:
            continue
        teacher_prompt = _teacher_prompt(trainer, ep, skill)
        completion = ep.tokens.completion_ids
        for offset, cands in ep.choices:
            if len(cands) < 2:
                continue
            s = torch.stack([_sequence_logp(model, ep.tokens.prompt_ids + completion[:offset], c) for c in cands])
            with torch.no_grad():
                t = torch.stack([_sequence_logp(model, teacher_prompt + completion[:offset], c) for c in cands])
            s, t = (s / tau).log_softmax(-1), (t / tau).log_softmax(-1)
            g = torch.sigmoid(beta * (t - s.detach()))
            terms.append((s.detach().exp() * g * (t - s)).sum())
            top = int(t.argmax())
            deciding.append(float(int(s.argmax()) != top))
            student_top.append(float(s[top].detach().exp()))
    stats = {"deciding_share": sum(deciding) / len(deciding),
             "student_prob_teacher_top": sum(student_top) / len(student_top)}
    return torch.stack(terms).sum() / len(terms), len(terms), stats


def _check_gradient(trainer, inputs, reference, lam):
    model = trainer.model
    g_full = _grads(model, trainer._compute_loss(model, inputs))
    plain = {k: v for k, v in inputs.items() if not k.startswith("opd_")}
    g_grpo = _grads(model, GRPOTrainer._compute_loss(trainer, model, plain))
    g_opd = _grads(model, reference)
    scale = max(g.abs().max().item() for g in g_opd)
    assert scale > 1e-5
    for full, grpo, opd in zip(g_full, g_grpo, g_opd):
        torch.testing.assert_close(full - grpo, lam * opd, atol=2e-5 * max(1.0, scale), rtol=2e-3)
    return g_full, g_grpo


def test_choices_gradient_is_grpo_plus_lambda_times_independent_expectation(make_trainer):
    lam = 0.8
    trainer = make_trainer(action_selection="choose", max_new_tokens_per_turn=32,
                           skillduet={"opd_coef": lam, "use_global": False, "opd_estimator": "choices"})
    inputs = _batch(trainer)
    reference, n_turns, stats = _reference_choices(trainer, trainer.skillduet.gate_beta)
    assert n_turns >= 2 and inputs["opd_dense_items"].item() == n_turns
    g_full, g_grpo = _check_gradient(trainer, inputs, reference, lam)
    # the logged mechanism statistics equal the plain forwards' (the choose-mode one at generation, the dense one in
    # the loss, both at these weights); the two numbers differ, so a swapped name fails
    assert abs(stats["deciding_share"] - stats["student_prob_teacher_top"]) > 0.05
    deciding = trainer._metrics["train"]["opd/choice/deciding_share"][-1]
    assert deciding == pytest.approx(stats["deciding_share"], abs=1e-6)
    trainer.log({})  # the dense statistics are token (here: turn) means of the logging interval
    assert trainer.state.log_history[-1]["opd/dense/student_prob_teacher_top"] == pytest.approx(
        stats["student_prob_teacher_top"], abs=1e-4)
    # Negative control: the paper's sampled estimator on the same batch moves the weights differently.
    trainer.skillduet.opd_estimator = "sampled"
    g_sampled = _grads(trainer.model, trainer._compute_loss(trainer.model, inputs))
    assert any(not torch.allclose(a - c, b - c, atol=1e-6) for a, b, c in zip(g_full, g_sampled, g_grpo))


def test_topk_gradient_is_grpo_plus_lambda_times_independent_expectation(make_trainer):
    lam, k = 0.6, 5
    trainer = make_trainer(skillduet={"opd_coef": lam, "use_global": False, "opd_estimator": "topk", "opd_topk": k})
    inputs = _batch(trainer)
    model, rollout, beta = trainer.model, trainer.last_rollout, trainer.skillduet.gate_beta
    tau = trainer.args.temperature
    num, den = 0.0, 0.0
    for i, (ep, skill) in enumerate(zip(rollout["episodes"], rollout["local_skills"])):
        if skill is None:
            continue
        completion = ep.tokens.completion_ids
        mask = inputs["opd_mask"][i, :len(completion)]
        s_ids = torch.tensor([list(ep.tokens.prompt_ids) + completion])
        s_all = (model(input_ids=s_ids).logits[0, len(ep.tokens.prompt_ids) - 1:-1].float() / tau).log_softmax(-1)
        teacher_prompt = _teacher_prompt(trainer, ep, skill)
        with torch.no_grad():
            t_ids = torch.tensor([teacher_prompt + completion])
            t_all = (model(input_ids=t_ids).logits[0, len(teacher_prompt) - 1:-1].float() / tau).log_softmax(-1)
        t, top = t_all.topk(k, dim=-1)
        torch.testing.assert_close(inputs["opd_topk_ids"][i, :len(completion)][mask > 0], top[mask > 0])
        s = s_all.gather(-1, top)
        g = torch.sigmoid(beta * (t - s.detach()))
        num = num + ((s.detach().exp() * g * (t - s)).sum(-1) * mask).sum()
        den += float(mask.sum())
    assert den > 0
    _check_gradient(trainer, inputs, num / den, lam)


@pytest.mark.parametrize("estimator", ["choices", "topk"])
def test_dense_estimators_need_teacher_at_generation(tmp_path, estimator):
    from skillduet_plugin.config import ConfigError
    from trl_helpers import small_args

    with pytest.raises(ConfigError, match="teacher_at=generation"):
        small_args(tmp_path, action_selection="choose", teacher_at="loss",
                   skillduet={"opd_estimator": estimator})
    if estimator == "choices":
        with pytest.raises(ConfigError, match="action_selection=choose"):
            small_args(tmp_path, skillduet={"opd_estimator": estimator})
