"""The SkillDuet engine loss equals verl's ppo_loss plus lambda times core.opd_loss on the same micro-batch."""

from __future__ import annotations

import pickle

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("verl")

from tensordict import TensorDict  # noqa: E402

from fakes import loss_settings  # noqa: E402
from skillduet_plugin.core.opd import opd_loss  # noqa: E402
from skillduet_plugin.integrations.verl.batch import nested  # noqa: E402
from skillduet_plugin.integrations.verl.loss import (OPD_MASK_KEY, TEACHER_LOGPROBS_KEY, make_loss_fn,  # noqa: E402
                                                     skillduet_ppo_loss)

PROMPT_LENS = [3, 2, 4]
RESP_LENS = [4, 2, 3]


def actor_config():
    from verl.workers.config import FSDPActorConfig

    return FSDPActorConfig(strategy="fsdp", ppo_mini_batch_size=3, ppo_micro_batch_size_per_gpu=3, rollout_n=1,
                           use_kl_loss=False, entropy_coeff=0.0, loss_agg_mode="token-mean")


def micro_batch(opd_rows=(1.0, 1.0, 1.0), seed=0, batch_num_tokens=None):
    """A V1-layout micro-batch (nested per-token fields) and the model's full-sequence log-probs."""
    from verl.utils import tensordict_utils as tu

    g = torch.Generator().manual_seed(seed)
    full = [-(torch.rand(p + r, generator=g) * 3 + 0.1) for p, r in zip(PROMPT_LENS, RESP_LENS)]
    leaf = torch.cat(full).requires_grad_(True)
    lengths = torch.tensor([p + r for p, r in zip(PROMPT_LENS, RESP_LENS)])
    log_probs = torch.nested.nested_tensor_from_jagged(
        leaf, offsets=torch.tensor([0] + list(torch.cumsum(lengths, 0))))
    student = [f[p - 1: p - 1 + r].detach() for f, p, r in zip(full, PROMPT_LENS, RESP_LENS)]
    mask = [torch.ones(r) for r in RESP_LENS]
    mask[0][-1] = 0.0  # an environment token
    td = TensorDict({
        "prompts": nested([torch.arange(p) for p in PROMPT_LENS]),
        "responses": nested([torch.arange(r) for r in RESP_LENS]),
        "response_mask": nested(mask),
        "old_log_probs": nested([s + 0.05 * torch.randn(s.shape, generator=g) for s in student]),
        "advantages": nested([torch.randn(r, generator=g) for r in RESP_LENS]),
        TEACHER_LOGPROBS_KEY: nested([s + torch.randn(s.shape, generator=g) for s in student]),
        OPD_MASK_KEY: nested([torch.full((r,), v) for r, v in zip(RESP_LENS, opd_rows)]),
    }, batch_size=3)
    tu.assign_non_tensor(td, dp_size=1, batch_num_tokens=batch_num_tokens, global_batch_size=None)
    return td, {"log_probs": log_probs}, leaf


def padded(td, key):
    return td.select(key).to_padded_tensor()[key]


def test_engine_loss_is_ppo_plus_lambda_opd():
    from verl.workers.utils.losses import ppo_loss
    from verl.workers.utils.padding import no_padding_2_padding

    td, out, leaf = micro_batch()
    ppo, _ = ppo_loss(actor_config(), out, td)
    total, metrics = skillduet_ppo_loss(actor_config(), out, td, **loss_settings(opd_coef=0.3, gate_beta=5.0))
    student = no_padding_2_padding(out["log_probs"], td)
    mask = padded(td, "response_mask")
    expected_opd, _ = opd_loss(student, padded(td, TEACHER_LOGPROBS_KEY), mask, beta=5.0)
    assert torch.allclose(total, ppo + 0.3 * expected_opd, atol=1e-6)
    assert expected_opd.abs().item() > 1e-3  # the OPD term is really there
    assert metrics["skillduet/opd_loss"].aggregate() == pytest.approx(expected_opd.item(), abs=1e-6)
    # gradient: verl's part plus lambda times core.opd's gradient
    (g_total,) = torch.autograd.grad(total, leaf, retain_graph=True)
    (g_ppo,) = torch.autograd.grad(ppo, leaf, retain_graph=True)
    (g_opd,) = torch.autograd.grad(expected_opd, leaf)
    assert torch.allclose(g_total, g_ppo + 0.3 * g_opd, atol=1e-6)


@pytest.mark.parametrize("global_tokens", [False, True])
def test_rows_without_local_skill_get_no_opd_term(global_tokens):
    from verl.workers.utils.losses import ppo_loss
    from verl.workers.utils.padding import no_padding_2_padding

    n_response_tokens = sum(RESP_LENS) - 1
    td, out, leaf = micro_batch(opd_rows=(1.0, 0.0, 1.0), batch_num_tokens=n_response_tokens if global_tokens else None)
    ppo, _ = ppo_loss(actor_config(), out, td)
    total, _ = skillduet_ppo_loss(actor_config(), out, td, **loss_settings(opd_coef=1.0))
    student = no_padding_2_padding(out["log_probs"], td)
    resp_mask = padded(td, "response_mask")
    opd_mask = resp_mask * padded(td, OPD_MASK_KEY)
    per_token = torch.sigmoid(5 * (padded(td, TEACHER_LOGPROBS_KEY) - student.detach())) * \
        (padded(td, TEACHER_LOGPROBS_KEY) - student)
    # verl's token-mean: with the global batch info it divides by the mini-batch's response tokens (the PPO
    # term's denominator), without it by the micro-batch's OPD tokens
    denominator = resp_mask.sum() if global_tokens else opd_mask.sum()
    expected = (per_token * opd_mask).sum() / denominator
    assert torch.allclose(total - ppo, expected, atol=1e-6)
    (g_total,) = torch.autograd.grad(total, leaf, retain_graph=True)
    (g_ppo,) = torch.autograd.grad(ppo, leaf)
    row1 = slice(PROMPT_LENS[0] + RESP_LENS[0], PROMPT_LENS[0] + RESP_LENS[0] + PROMPT_LENS[1] + RESP_LENS[1])
    assert torch.equal(g_total[row1], g_ppo[row1])  # no distillation gradient on the skill-less row


def test_zero_coef_is_exactly_ppo_and_missing_keys_are_named():
    from verl.workers.utils.losses import ppo_loss

    td, out, _ = micro_batch()
    ppo, _ = ppo_loss(actor_config(), out, td)
    total, metrics = skillduet_ppo_loss(actor_config(), out, td, **loss_settings(opd_coef=0.0))
    assert torch.equal(total, ppo) and "skillduet/opd_loss" not in metrics
    del td[TEACHER_LOGPROBS_KEY]
    with pytest.raises(KeyError, match="skillduet_sync"):
        skillduet_ppo_loss(actor_config(), out, td, **loss_settings(opd_coef=0.1))


def test_loss_fn_pickles_for_set_loss_fn():
    import cloudpickle

    fn = make_loss_fn(actor_config(), **loss_settings(opd_coef=0.2, gate_beta=4.0))
    clone = pickle.loads(cloudpickle.dumps(fn))
    td, out, _ = micro_batch()
    assert torch.allclose(clone(model_output=out, data=td)[0], fn(model_output=out, data=td)[0])
    assert clone.keywords["opd_coef"] == 0.2 and clone.keywords["gate_beta"] == 4.0
