"""``skillduet.opd_estimator=topk`` on verl: the engine loss, called as verl's logits processor and then as the loss,
gives ``core.opd.opd_expected`` over the teacher's top-k ids at the position predicting each response token,
aggregated like the sampled term; its gradient with respect to the logits equals an independent computation's.
Also ``skillduet.policy_loss_coef`` (a scale of verl's ``ppo_loss``) and the teacher pass's top-k round trip."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("verl")

from tensordict import TensorDict  # noqa: E402

from fakes import loss_settings  # noqa: E402
from skillduet_plugin.core.opd import opd_expected  # noqa: E402
from skillduet_plugin.integrations.verl.batch import nested  # noqa: E402
from skillduet_plugin.integrations.verl.loss import OPD_MASK_KEY, make_loss_fn, opd_token_weights  # noqa: E402
from skillduet_plugin.integrations.verl.topk import (TEACHER_TOPK_IDS_KEY, TEACHER_TOPK_LOGPROBS_KEY,  # noqa: E402
                                                     TEACHER_TOPK_REQUEST, flat_rows, split_teacher_topk)

PROMPT_LENS = [3, 2, 4]
RESP_LENS = [4, 3, 2]
SUPERVISED = [True, False, True]
VOCAB, K, BETA = 11, 3, 5.0


def actor_config():
    from verl.workers.config import FSDPActorConfig

    return FSDPActorConfig(strategy="fsdp", ppo_mini_batch_size=3, ppo_micro_batch_size_per_gpu=3, rollout_n=1,
                           use_kl_loss=False, entropy_coeff=0.0, loss_agg_mode="token-mean")


def _offsets(lens):
    return torch.tensor([0] + torch.cumsum(torch.tensor(lens), 0).tolist())


def batch(seed=0, shift=0):
    """A V1-layout micro-batch, packed student logits (with grad) and per row the teacher's top-k ids/log-probs.
    ``shift`` puts the teacher's rows one position off (the negative control)."""
    from verl.utils import tensordict_utils as tu

    g = torch.Generator().manual_seed(seed)
    seq = [p + r for p, r in zip(PROMPT_LENS, RESP_LENS)]
    logits = torch.randn(1, sum(seq), VOCAB, generator=g).requires_grad_(True)
    ids_full = [torch.randint(0, VOCAB, (n,), generator=g) for n in seq]
    ids = [torch.stack([torch.randperm(VOCAB, generator=g)[:K] for _ in range(r)]) for r in RESP_LENS]
    teacher = [torch.log_softmax(torch.randn(r, VOCAB, generator=g) * 2, -1).gather(-1, i)
               for r, i in zip(RESP_LENS, ids)]
    if shift:
        ids = [torch.roll(i, shift, dims=0) for i in ids]
        teacher = [torch.roll(t, shift, dims=0) for t in teacher]
    masks = [torch.ones(r) for r in RESP_LENS]
    masks[0][-1] = 0.0  # an environment token
    td = TensorDict({
        "prompts": nested([x[:p] for x, p in zip(ids_full, PROMPT_LENS)]),
        "responses": nested([x[p:] for x, p in zip(ids_full, PROMPT_LENS)]),
        "input_ids": nested(ids_full),
        "response_mask": nested(masks),
        "old_log_probs": nested([-torch.rand(r, generator=g) for r in RESP_LENS]),
        "advantages": nested([torch.randn(r, generator=g) for r in RESP_LENS]),
        TEACHER_TOPK_IDS_KEY: nested(flat_rows(ids)),
        TEACHER_TOPK_LOGPROBS_KEY: nested(flat_rows(teacher)),
        OPD_MASK_KEY: nested(opd_token_weights(masks, SUPERVISED)),
    }, batch_size=3)
    tu.assign_non_tensor(td, dp_size=1, batch_num_tokens=None, global_batch_size=None)
    return td, logits, ids_full, ids, teacher, masks


def model_output(fn, td, logits, ids_full):
    """What verl's FSDP engine hands the loss: its processor's outputs and the sampled tokens' log-probs, nested."""
    offsets = _offsets([len(x) for x in ids_full])
    processed = fn(student_logits=logits, data=td)
    labels = torch.cat([torch.roll(x, -1) for x in ids_full])
    log_probs = torch.log_softmax(logits[0], -1).gather(-1, labels[:, None])[:, 0]
    out = {k: torch.nested.nested_tensor_from_jagged(v[0], offsets) for k, v in processed.items()}
    out["log_probs"] = torch.nested.nested_tensor_from_jagged(log_probs, offsets)
    return out


def independent_opd(logits, ids, teacher, masks):
    """Eq. 1's expected term over the teacher's ids at position P + t - 1, token mean over the supervised tokens."""
    total, n, start = 0.0, 0.0, 0
    for p, r, sup, i, t, m in zip(PROMPT_LENS, RESP_LENS, SUPERVISED, ids, teacher, masks):
        rows = torch.log_softmax(logits[0, start + p - 1: start + p - 1 + r], -1).gather(-1, i)
        per, _ = opd_expected(rows, t, beta=BETA)
        if sup:
            total = total + (per * m).sum()
            n += float(m.sum())
        start += p + r
    return total / n


def independent_stats(logits, ids, teacher, masks):
    """The logged dense statistics by hand, one supervised token at a time: the gate's expectation under the
    student, the share of tokens whose two first choices differ, and each model's probability of the teacher's
    first choice (the student's from its full next-token distribution)."""
    sums = {"gate_mean": 0.0, "deciding_share": 0.0, "student_prob_teacher_top": 0.0, "teacher_prob_teacher_top": 0.0}
    n, start = 0, 0
    for p, r, sup, i, t, m in zip(PROMPT_LENS, RESP_LENS, SUPERVISED, ids, teacher, masks):
        rows = torch.log_softmax(logits[0, start + p - 1: start + p - 1 + r].detach(), -1).gather(-1, i)
        start += p + r
        if not sup:
            continue
        for j in range(r):
            if m[j] == 0:
                continue
            s_row, t_row = rows[j].tolist(), t[j].tolist()
            top = max(range(K), key=lambda k: t_row[k])
            sums["gate_mean"] += sum(math.exp(s_row[k]) / (1 + math.exp(-BETA * (t_row[k] - s_row[k])))
                                     for k in range(K))
            sums["deciding_share"] += float(max(range(K), key=lambda k: s_row[k]) != top)
            sums["student_prob_teacher_top"] += math.exp(s_row[top])
            sums["teacher_prob_teacher_top"] += math.exp(t_row[top])
            n += 1
    return {name: value / n for name, value in sums.items()}


@pytest.mark.parametrize("coef", [1.0, 0.5])
def test_topk_loss_and_gradient_equal_core_function(coef):
    from verl.workers.utils.losses import ppo_loss

    td, logits, ids_full, ids, teacher, masks = batch()
    settings = loss_settings(opd_coef=0.3, gate_beta=BETA, policy_loss_coef=coef, estimator="topk", topk=K)
    fn = make_loss_fn(actor_config(), **settings)
    out = model_output(fn, td, logits, ids_full)
    total, metrics = fn(model_output=out, data=td)
    ppo, _ = ppo_loss(actor_config(), {"log_probs": out["log_probs"]}, td)
    expected_opd = independent_opd(logits, ids, teacher, masks)
    assert expected_opd.abs().item() > 1e-3
    assert torch.allclose(total, coef * ppo + 0.3 * expected_opd, atol=1e-6)
    assert metrics["skillduet/opd_loss"].aggregate() == pytest.approx(expected_opd.item(), abs=1e-6)
    stats = independent_stats(logits, ids, teacher, masks)
    assert 0.0 < stats["deciding_share"] < 1.0  # the batch has tokens of both kinds
    for name, value in stats.items():
        assert metrics[f"skillduet/opd/{name}"].aggregate() == pytest.approx(value, abs=1e-5), name
    # negative control: the statistics are not interchangeable on this batch (a swapped name would fail above)
    assert len({round(v, 3) for v in stats.values()}) == len(stats)
    (g_total,) = torch.autograd.grad(total, logits, retain_graph=True)
    (g_expected,) = torch.autograd.grad(coef * ppo + 0.3 * expected_opd, logits)
    assert g_total.abs().max() > 1e-4
    assert torch.allclose(g_total, g_expected, atol=1e-6)


def test_topk_gradient_negative_control_off_by_one():
    """The teacher's rows one position off: the test's assertion fails (the position mapping is what is tested)."""
    td, logits, ids_full, ids, teacher, masks = batch(shift=1)
    fn = make_loss_fn(actor_config(), **loss_settings(opd_coef=1.0, gate_beta=BETA, estimator="topk", topk=K))
    total, _ = fn(model_output=model_output(fn, td, logits, ids_full), data=td)
    _, _, _, true_ids, true_teacher, _ = batch()
    (g_total,) = torch.autograd.grad(total, logits, retain_graph=True)
    (g_true,) = torch.autograd.grad(independent_opd(logits, true_ids, true_teacher, masks), logits)
    assert not torch.allclose(g_total, g_true, atol=1e-4)


def test_policy_loss_coef_scales_ppo_loss_only():
    from verl.workers.utils.losses import ppo_loss

    td, logits, ids_full, *_ = batch()
    out = model_output(make_loss_fn(actor_config(), **loss_settings(opd_coef=0.0, topk=K)), td, logits, ids_full)
    ppo, _ = ppo_loss(actor_config(), {"log_probs": out["log_probs"]}, td)
    for coef in (1.0, 0.25, 0.0):
        fn = make_loss_fn(actor_config(), **loss_settings(opd_coef=0.0, policy_loss_coef=coef))
        total, _ = fn(model_output=out, data=td)
        assert torch.allclose(total, coef * ppo), coef


def test_teacher_request_returns_topk_of_response_positions():
    """The teacher pass's processor: top-k ids and log-probs at P + t - 1 (cut back per row), no loss."""
    from verl.utils import tensordict_utils as tu

    td, logits, ids_full, *_ = batch()
    tu.assign_non_tensor(td, **{TEACHER_TOPK_REQUEST: K})
    fn = make_loss_fn(actor_config(), **loss_settings(opd_coef=0.3, estimator="topk", topk=K))
    out = model_output(fn, td, logits, ids_full)
    loss, metrics = fn(model_output=out, data=td)
    assert float(loss) == 0.0 and metrics == {}
    contexts = [x[:p].tolist() for x, p in zip(ids_full, PROMPT_LENS)]
    responses = [x[p:].tolist() for x, p in zip(ids_full, PROMPT_LENS)]
    rows = split_teacher_topk(TensorDict(out, batch_size=[]), contexts, responses, K)
    start = 0
    for (got_ids, got_logps), p, r in zip(rows, PROMPT_LENS, RESP_LENS):
        want = torch.topk(torch.log_softmax(logits[0, start + p - 1: start + p - 1 + r].detach(), -1), K, dim=-1)
        assert torch.equal(got_ids, want.indices) and torch.allclose(got_logps, want.values, atol=1e-6)
        start += p + r


def test_estimator_choices_is_refused_on_verl():
    from skillduet_plugin.core.settings import ConfigError
    from skillduet_plugin.integrations.verl.settings import parse_settings

    with pytest.raises(ConfigError, match=r"^skillduet\.opd_estimator='choices' is invalid: .*action_selection=choose"):
        parse_settings({"opd_estimator": "choices"})
    with pytest.raises(ConfigError, match=r"^skillduet\.opd_estimator='topk' is invalid: .*teacher_logprobs=actor"):
        parse_settings({"opd_estimator": "topk", "teacher_logprobs": "rollout"})
    assert parse_settings({"opd_estimator": "topk"}).method.opd_topk == 8
