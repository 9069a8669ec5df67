"""Batched response log-probs equal a plain one-sequence-at-a-time computation on the tiny model."""

from __future__ import annotations

import pytest
import torch

from skillduet_plugin.core.logprobs import pad_logprobs, plan_chunks, response_logprobs


def naive_logprobs(model, context, response, temperature=1.0):
    ids = torch.tensor([list(context) + list(response)])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float() / temperature
    logp = torch.log_softmax(logits, dim=-1)
    start = len(context)
    return torch.stack([logp[start + j - 1, tok] for j, tok in enumerate(response)])


@pytest.fixture()
def mixed_batch():
    gen = torch.Generator().manual_seed(0)
    shapes = [(5, 3), (12, 9), (2, 1), (30, 17), (7, 0), (1, 6)]
    contexts = [torch.randint(3, 500, (c,), generator=gen).tolist() for c, _ in shapes]
    responses = [torch.randint(3, 500, (r,), generator=gen).tolist() for _, r in shapes]
    return contexts, responses


@pytest.mark.parametrize("token_budget", [16, 64, 100000])
def test_matches_one_at_a_time(tiny_model, mixed_batch, token_budget):
    contexts, responses = mixed_batch
    with torch.no_grad():
        got = response_logprobs(tiny_model, contexts, responses, token_budget=token_budget)
    for ctx, resp, g in zip(contexts, responses, got):
        assert g.shape == (len(resp),)
        if resp:
            torch.testing.assert_close(g, naive_logprobs(tiny_model, ctx, resp), rtol=1e-4, atol=1e-5)


def test_full_logits_fallback_path_agrees(tiny_model, mixed_batch, monkeypatch):
    import skillduet_plugin.core.logprobs as lp

    contexts, responses = mixed_batch
    with torch.no_grad():
        fast = response_logprobs(tiny_model, contexts, responses)
        monkeypatch.setattr(lp, "_split_model", lambda model: None)
        slow = response_logprobs(tiny_model, contexts, responses)
    for a, b in zip(fast, slow):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_temperature_scaling(tiny_model, mixed_batch):
    contexts, responses = mixed_batch
    with torch.no_grad():
        got = response_logprobs(tiny_model, contexts[:2], responses[:2], temperature=0.7)
    torch.testing.assert_close(got[1], naive_logprobs(tiny_model, contexts[1], responses[1], 0.7),
                               rtol=1e-4, atol=1e-5)


def test_gradients_flow(tiny_model, mixed_batch):
    contexts, responses = mixed_batch
    out = response_logprobs(tiny_model, contexts[:2], responses[:2])
    torch.cat(out).sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in tiny_model.parameters())


def test_plan_chunks_respects_budget_and_covers_all():
    lengths = [10, 3, 8, 8, 1, 20]
    chunks = plan_chunks(lengths, token_budget=20)
    assert sorted(i for c in chunks for i in c) == list(range(6))
    for c in chunks:
        assert len(c) == 1 or max(lengths[i] for i in c) * len(c) <= 20


def test_bad_input_errors(tiny_model):
    with pytest.raises(ValueError, match=r"contexts\[0\] is empty"):
        response_logprobs(tiny_model, [[]], [[1]])
    with pytest.raises(ValueError, match="2 contexts but 1 responses"):
        response_logprobs(tiny_model, [[1], [2]], [[1]])


def test_pad_logprobs():
    out, mask = pad_logprobs([torch.tensor([1.0, 2.0]), torch.tensor([3.0])])
    assert out.tolist() == [[1.0, 2.0], [3.0, 0.0]]
    assert mask.tolist() == [[1.0, 1.0], [1.0, 0.0]]


def test_peft_wrapped_model_uses_the_adapters(tiny_model, mixed_batch):
    peft = pytest.importorskip("peft")
    contexts, responses = mixed_batch
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    model = peft.get_peft_model(tiny_model, config)
    with torch.no_grad():
        got = response_logprobs(model, contexts, responses)
        for ctx, resp, g in zip(contexts, responses, got):
            if resp:
                torch.testing.assert_close(g, naive_logprobs(model, ctx, resp), rtol=1e-4, atol=1e-5)
        with model.disable_adapter():
            plain = response_logprobs(model, contexts[1:2], responses[1:2])[0]
    assert not torch.allclose(plain, got[1])  # the adapters really changed the numbers


@pytest.mark.parametrize("field", ["final_logit_softcapping", "logit_scale", "logits_scaling"])
def test_models_that_transform_their_logits_are_scored_through_their_own_forward(tiny_model, field, monkeypatch):
    import skillduet_plugin.core.logprobs as lp

    assert lp._split_model(tiny_model) is not None  # the plain decoder + head path by default
    monkeypatch.setattr(tiny_model.config, field, 0.5, raising=False)
    assert lp._split_model(tiny_model) is None  # the head alone would miss the model's own scaling or cap


def test_head_fp32_under_bfloat16_autocast_runs_the_projection_in_float32(tiny_model, mixed_batch):
    """Under bf16 autocast the flag must make the LM head a float32 projection of the (bf16-computed) hidden states:
    checked against that computation done by hand, one sequence at a time; without the flag the head runs in bf16
    and misses it by far more (the negative control: the flag is not a no-op)."""
    contexts, responses = mixed_batch
    checked = 0
    with torch.no_grad():
        for ctx, resp in zip(contexts, responses):
            if not resp:
                continue
            with torch.autocast("cpu", dtype=torch.bfloat16):
                hidden = tiny_model.model(input_ids=torch.tensor([ctx + resp])).last_hidden_state
                flagged = response_logprobs(tiny_model, [ctx], [resp], head_fp32=True)[0]
                plain = response_logprobs(tiny_model, [ctx], [resp])[0]
            logits = hidden[0, len(ctx) - 1:-1].float() @ tiny_model.lm_head.weight.float().T
            expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(resp)[:, None])[:, 0]
            torch.testing.assert_close(flagged, expected, rtol=0, atol=1e-5)
            assert (plain - expected).abs().max() > 1e-4
            checked += 1
    assert checked == 5


def test_head_in_float32_matches_default_in_float32(tiny_model, mixed_batch):
    contexts, responses = mixed_batch
    with torch.no_grad():
        a = response_logprobs(tiny_model, contexts, responses)
        b = response_logprobs(tiny_model, contexts, responses, head_fp32=True)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, rtol=0, atol=1e-6)
