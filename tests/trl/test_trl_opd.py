"""The adapter's loss on one real batch: GRPO + lambda * OPD, checked against an independent computation.

These run with ``use_global=False`` (Local-only): the loss path is the same and no scoring pass is paid for.
"""

from __future__ import annotations

import copy

import pytest
import torch
from trl_helpers import group_rows
from trl import GRPOTrainer

from skillduet_plugin.core.conversation import ChatTokenizer


def _batch(trainer, drop_every_other_skill=True, task_index=3):
    """One generation batch in train mode; half the rows lose their Local skill (no OPD for them)."""
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    if drop_every_other_skill:
        extract = trainer.lifecycle.extract

        def partial(trajs, step):
            result = extract(trajs, step)
            for t in trajs[1::2]:
                result.assignment.pop(t.traj_id, None)
            return result

        trainer.lifecycle.extract = partial
    torch.manual_seed(3)
    inputs = trainer._generate_and_score_completions(group_rows(trainer, task_index))
    # Rewards of a random policy tie, so GRPO's advantages are 0; fixed advantages make its gradient non-trivial.
    inputs["advantages"] = torch.tensor([1.0, -0.5, 0.25, -0.75])
    return inputs


def _logged(trainer):
    """What the trainer logs for the interval so far (its ``log``, as at a logging step)."""
    trainer.log({})
    return trainer.state.log_history[-1]


def _plain_logps(model, prompt, completion, temperature):
    """log p(completion | prompt) with a plain forward and log_softmax: (len(completion),)."""
    ids = torch.tensor([list(prompt) + list(completion)])
    logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1].float() / temperature
    return logits.log_softmax(-1).gather(-1, torch.tensor(list(completion))[:, None]).squeeze(-1)


def _grads(model, loss):
    model.zero_grad(set_to_none=True)
    loss.backward()
    return [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]


def _reference_opd(trainer, inputs, rows=None):
    """Independent OPD: own teacher/student forwards, own mask from the episodes, own gate and mean (over the
    batch rows ``rows``, default all)."""
    s, t, m = _reference_logps(trainer, inputs, rows)
    gate = torch.sigmoid(trainer.skillduet.gate_beta * (t - s.detach()))
    return (m * gate * (t - s)).sum() / m.sum(), t, m


def _reference_logps(trainer, inputs, rows=None):
    """The student and teacher log-probs of the sampled tokens from plain forwards, and the OPD mask built from
    the episodes: ``(rows, completion_len)`` each."""
    model, chat = trainer.model, ChatTokenizer(trainer.processing_class)
    rollout = trainer.last_rollout
    width = inputs["completion_ids"].shape[1]
    s_rows, t_rows, m_rows = [], [], []
    for i, ep in enumerate(rollout["episodes"]):
        if rows is not None and i not in rows:
            continue
        completion = ep.tokens.completion_ids
        s = _plain_logps(model, ep.tokens.prompt_ids, completion, trainer.args.temperature)
        skill = rollout["local_skills"][i]
        mask = torch.tensor(ep.tokens.completion_mask, dtype=torch.float32)
        if skill is None:
            t, mask = torch.zeros_like(s), torch.zeros_like(mask)
        else:
            teacher_prompt = chat.prompt_ids(trainer.lifecycle.teacher_messages(
                ep.prompt_messages, task=ep.task, scope=ep.scope, local_skill=skill))
            with torch.no_grad():
                t = _plain_logps(model, teacher_prompt, completion, trainer.args.temperature)
        pad = width - len(completion)
        s_rows.append(torch.nn.functional.pad(s, (0, pad)))
        t_rows.append(torch.nn.functional.pad(t, (0, pad)))
        m_rows.append(torch.nn.functional.pad(mask, (0, pad)))
    return torch.stack(s_rows), torch.stack(t_rows), torch.stack(m_rows)


def test_gradient_is_grpo_plus_lambda_times_independent_opd(make_trainer):
    lam = 0.7
    trainer = make_trainer(skillduet={"opd_coef": lam, "use_global": False})
    inputs = _batch(trainer)
    model = trainer.model
    ref_loss, ref_t, ref_m = _reference_opd(trainer, inputs)

    # The batch carries exactly the independent mask and teacher log-probs (teacher = same completion tokens).
    torch.testing.assert_close(inputs["opd_mask"], ref_m)
    assert 0 < ref_m.sum() < inputs["completion_mask"].sum()  # some rows and env tokens are excluded
    torch.testing.assert_close(inputs["opd_teacher_logps"] * ref_m, ref_t * ref_m, atol=2e-5, rtol=1e-5)

    g_full = _grads(model, trainer._compute_loss(model, inputs))
    plain = {k: v for k, v in inputs.items() if not k.startswith("opd_")}
    g_grpo = _grads(model, GRPOTrainer._compute_loss(trainer, model, plain))
    g_opd = _grads(model, ref_loss)
    scale = max(g.abs().max().item() for g in g_opd)
    assert scale > 1e-4 and max(g.abs().max().item() for g in g_grpo) > 1e-4
    for full, grpo, opd in zip(g_full, g_grpo, g_opd):
        torch.testing.assert_close(full - grpo, lam * opd, atol=1e-5 * max(1.0, scale), rtol=1e-3)
    assert _logged(trainer)["opd/loss"] == pytest.approx(ref_loss.item(), abs=1e-5)


def test_opd_term_is_scaled_like_trl_under_gradient_accumulation(make_trainer):
    trainer = make_trainer(skillduet={"opd_coef": 1.0, "use_global": False})
    inputs = _batch(trainer)
    plain = {k: v for k, v in inputs.items() if not k.startswith("opd_")}
    with torch.no_grad():
        grpo1 = GRPOTrainer._compute_loss(trainer, trainer.model, plain)
        full1 = trainer._compute_loss(trainer.model, inputs)
        trainer.current_gradient_accumulation_steps = 2
        grpo2 = GRPOTrainer._compute_loss(trainer, trainer.model, plain)
        full2 = trainer._compute_loss(trainer.model, inputs)
    opd1, opd2 = (full1 - grpo1).item(), (full2 - grpo2).item()
    assert opd1 != 0
    assert opd2 == pytest.approx(opd1 / 2, rel=1e-4, abs=1e-7)


def test_teacher_prompt_has_the_local_skill_and_the_student_prompt_does_not(make_trainer):
    trainer = make_trainer(skillduet={"opd_coef": 0.5, "use_global": False}, teacher_at="loss")
    inputs = _batch(trainer, drop_every_other_skill=False)
    tok = trainer.processing_class
    skills = trainer.last_rollout["local_skills"]
    assert all(s is not None for s in skills)
    for i, skill in enumerate(skills):
        student = tok.decode(inputs["prompt_ids"][i][inputs["prompt_mask"][i] == 1])
        teacher = tok.decode(inputs["opd_teacher_prompt_ids"][i][inputs["opd_teacher_prompt_mask"][i] == 1])
        first_line = skill.text.strip().splitlines()[0].lstrip("- ").strip()[:40]
        assert first_line in teacher and first_line not in student
        # Same conversation around the skill: the student prompt minus nothing but the inserted section.
        assert teacher.startswith(student.split("Your task is to:")[0])
    # teacher_at="loss": the live teacher pass inside the loss equals an independent forward on the same tokens.
    ref_loss, ref_t, ref_m = _reference_opd(trainer, inputs)
    live = trainer._teacher_logps(trainer.model, inputs["opd_teacher_prompt_ids"], inputs["opd_teacher_prompt_mask"],
                                  inputs["completion_ids"], inputs["completion_mask"], inputs["opd_mask"].sum(1))
    torch.testing.assert_close(live * ref_m, ref_t * ref_m, atol=2e-5, rtol=1e-5)
    with torch.no_grad():
        trainer._compute_loss(trainer.model, inputs)
    assert _logged(trainer)["opd/loss"] == pytest.approx(ref_loss.item(), abs=1e-5)


def test_environment_tokens_carry_no_loss(make_trainer):
    trainer = make_trainer(skillduet={"opd_coef": 1.0, "use_global": False})
    inputs = _batch(trainer, drop_every_other_skill=False)
    env = (inputs["completion_mask"] == 1) & (inputs["tool_mask"] == 0)
    assert env.sum() > 0  # the batch has environment turns
    assert (inputs["opd_mask"][env] == 0).all()

    captured = {}
    original = trainer._get_per_token_logps_and_entropies

    def keep(*args, **kwargs):
        out = original(*args, **kwargs)
        if torch.is_grad_enabled():
            out[0].retain_grad()
            captured["s"] = out[0]
        return out

    trainer._get_per_token_logps_and_entropies = keep
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    grad = captured["s"].grad
    assert (grad[env] == 0).all()
    policy = (inputs["completion_mask"] * inputs["tool_mask"]).bool()
    assert (grad[policy] != 0).float().mean() > 0.9

    # Garbage teacher values on environment tokens change nothing.
    poisoned = copy.copy(inputs)
    poisoned["opd_teacher_logps"] = inputs["opd_teacher_logps"].masked_fill(env, 50.0)
    with torch.no_grad():
        a = trainer._compute_loss(trainer.model, inputs)
        b = trainer._compute_loss(trainer.model, poisoned)
    assert a.item() == b.item()


def test_invalid_actions_are_penalised_as_configured(make_trainer):
    trainer = make_trainer(skillduet={"opd_coef": 0.1, "use_global": False}, invalid_action_penalty=0.25,
                           reward_scale=2.0)
    _batch(trainer, drop_every_other_skill=False)
    eps = trainer.last_rollout["episodes"]
    expected = sum(2.0 * e.reward - 0.25 * e.invalid_actions for e in eps) / len(eps)
    assert sum(e.invalid_actions for e in eps) > 0
    assert trainer._metrics["train"]["rewards/env_reward/mean"][-1] == pytest.approx(expected)


def _split_batch(trainer, drop_rows):
    """One 4-row generation batch in which the rows in ``drop_rows`` have no Local skill."""
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    extract = trainer.lifecycle.extract

    def partial(trajs, step):
        result = extract(trajs, step)
        for i in drop_rows:
            result.assignment.pop(trajs[i].traj_id, None)
        return result

    trainer.lifecycle.extract = partial
    torch.manual_seed(3)
    inputs = trainer._generate_and_score_completions(group_rows(trainer, 3))
    inputs["advantages"] = torch.tensor([1.0, -0.5, 0.25, -0.75])
    return inputs


def _opd_grads_of_slices(trainer, slices):
    """Sum over ``slices`` of the gradient of (adapter loss - TRL loss), i.e. of lambda * the OPD term."""
    total = None
    for part in slices:
        plain = {k: v for k, v in part.items() if not k.startswith("opd_")}
        g_full = _grads(trainer.model, trainer._compute_loss(trainer.model, part))
        g_grpo = _grads(trainer.model, GRPOTrainer._compute_loss(trainer, trainer.model, plain))
        diff = [a - b for a, b in zip(g_full, g_grpo)]
        total = diff if total is None else [t + d for t, d in zip(total, diff)]
    return total


def _assert_close_grads(got, want):
    scale = max(g.abs().max().item() for g in want)
    assert scale > 1e-4
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=2e-5 * max(1.0, scale), rtol=1e-3)


def test_opd_is_eq1_over_the_generation_batch_under_gradient_accumulation(make_trainer):
    """Two micro-batches with very different supervised counts: the summed OPD gradient is the gradient of Eq. 1
    over the whole batch (not the mean of the two micro-batch means, which differs when the counts differ)."""
    from trl.trainer.utils import split_tensor_dict

    trainer = make_trainer(skillduet={"opd_coef": 1.0, "use_global": False})
    inputs = _split_batch(trainer, drop_rows=[3])  # rows 0, 1 | 2, 3: two supervised rows against one
    ref_loss, _, ref_m = _reference_opd(trainer, inputs)
    halves = split_tensor_dict(inputs, 2)
    counts = [float(h["opd_mask"].sum()) for h in halves]
    assert counts[0] > 1.5 * counts[1] > 0
    trainer.current_gradient_accumulation_steps = 2
    trainer.args.steps_per_generation = 2
    got = _opd_grads_of_slices(trainer, halves)
    _assert_close_grads(got, _grads(trainer.model, ref_loss))
    assert float(inputs["opd_num_items"]) == float(ref_m.sum())

    # negative control: the old per-micro-batch normalisation (mean of the two micro-batch means) differs
    old = sum(_reference_opd(trainer, inputs, rows=rows)[0] for rows in ([0, 1], [2, 3])) / 2
    assert abs(old.item() - ref_loss.item()) > 0.1 * abs(ref_loss.item())


def test_opd_is_eq1_over_the_batch_across_data_parallel_ranks(make_trainer, monkeypatch):
    """Two simulated ranks (each holding half the batch, DDP averaging their gradients) give Eq. 1 over the
    union: each rank divides by the global supervised count over the number of ranks."""
    from trl.trainer.utils import split_tensor_dict

    trainer = make_trainer(skillduet={"opd_coef": 1.0, "use_global": False})
    inputs = _split_batch(trainer, drop_rows=[3])
    ref_loss, _, _ = _reference_opd(trainer, inputs)
    monkeypatch.setattr(type(trainer.accelerator), "num_processes", property(lambda self: 2))
    ranks = split_tensor_dict(inputs, 2)  # opd_num_items is the all-ranks total, as gathered in training
    summed = _opd_grads_of_slices(trainer, ranks)
    _assert_close_grads([g / 2 for g in summed], _grads(trainer.model, ref_loss))  # DDP: mean over ranks


def _gate_token_means(trainer, s, t, m):
    """The gate statistics by hand: token means over the supervised tokens."""
    s, t = s.detach(), t.detach()
    gate, n = torch.sigmoid(trainer.skillduet.gate_beta * (t - s)), m.sum()
    return {"opd/gate_mean": float((gate * m).sum() / n), "opd/gate_active_ratio": float(((t > s) * m).sum() / n),
            "opd/teacher_minus_student": float(((t - s) * m).sum() / n)}


def test_logged_gate_statistics_are_token_means_over_the_micro_batches(make_trainer):
    """Two micro-batches with 2 and 1 supervised rows: the interval's logged gate statistics are token means over
    all its supervised tokens (by hand from plain forwards), one value each, not the mean of the two micro-batch
    means that TRL's log would make of values appended per micro-batch."""
    from trl.trainer.utils import split_tensor_dict

    trainer = make_trainer(skillduet={"opd_coef": 1.0, "use_global": False}, logging_steps=1)
    inputs = _split_batch(trainer, drop_rows=[3])  # rows 0, 1 | 2, 3: two supervised rows against one
    s, t, m = _reference_logps(trainer, inputs)
    want = _gate_token_means(trainer, s, t, m)
    halves = split_tensor_dict(inputs, 2)
    assert [float(h["opd_mask"].sum()) > 0 for h in halves] == [True, True]
    trainer.current_gradient_accumulation_steps = 2
    trainer.args.steps_per_generation = 2
    with torch.no_grad():
        for half in halves:
            trainer._compute_loss(trainer.model, half)
    got = _logged(trainer)
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-4, abs=1e-5), key
    assert got["opd/loss"] == pytest.approx(_reference_opd(trainer, inputs)[0].item(), abs=1e-5)  # Eq. 1, whole batch
    assert len([k for k in got if k.startswith("opd/dense/")]) == 0  # sampled estimator: no dense statistics

    # negative control: the mean of the two micro-batch means is another number (what the old log showed)
    parts = [_gate_token_means(trainer, s[r], t[r], m[r]) for r in ([0, 1], [2, 3])]
    old = {k: (parts[0][k] + parts[1][k]) / 2 for k in want}
    assert max(abs(old[k] - want[k]) for k in want) > 1e-3
    # the interval is flushed: the next log without a supervised token writes no gate statistic
    trainer.log({})
    assert "opd/gate_mean" not in trainer.state.log_history[-1]


def test_token_means_sum_weighted_values_over_micro_batches_and_processes():
    """TokenMeans by hand: two processes, each with two micro-batches; the gather concatenates the processes'
    sums (as accelerate's does), and the result is the token mean over all four."""
    from skillduet_plugin.integrations.trl.token_means import TokenMeans

    ranks = [TokenMeans(["opd/gate_mean", "opd/other"]) for _ in range(2)]
    ranks[0].add("train", {"opd/gate_mean": 0.2}, 10)
    ranks[0].add("train", {"opd/gate_mean": 0.8}, 2)
    ranks[1].add("train", {"opd/gate_mean": 0.5}, 4)
    ranks[1].add("eval", {"opd/gate_mean": 0.9}, 1)
    staged = [r._sums["train"].clone() for r in ranks]

    def gather(tensor):  # what every process receives: all processes' tensors along dim 0
        assert tensor.shape == (1, 2, 2)
        return torch.cat([x[None] for x in staged])

    got = ranks[0].flush("train", gather)
    want = (0.2 * 10 + 0.8 * 2 + 0.5 * 4) / 16
    assert got == {"opd/gate_mean": pytest.approx(want)}  # "opd/other" had no token: not logged
    assert abs(want - (0.2 + 0.8 + 0.5) / 3) > 0.05  # negative control: the mean of the means differs
    assert ranks[0].flush("train") == {}  # reset after a flush
    assert ranks[1].flush("eval") == {"opd/gate_mean": pytest.approx(0.9)}  # modes are apart
    with pytest.raises(KeyError, match="opd/unknown"):
        ranks[0].add("train", {"opd/unknown": 1.0}, 1)
