"""The in-process transformers backend on the tiny model: batching, left padding, new tokens only, EOS, limits."""

from __future__ import annotations

import asyncio

import pytest
import torch

from skillduet_plugin.config import BackendConfig
from skillduet_plugin.llm import ChatRequest, make_backend
from skillduet_plugin.llm.hf_backend import TransformersBackend

CONVERSATIONS = [
    [{"role": "user", "content": "put a clean knife in drawer."}],
    [{"role": "system", "content": "You are an expert agent operating in the ALFRED Embodied Environment."},
     {"role": "user", "content": "Your task is to: heat some egg and put it in countertop. You arrive at "
                                 "countertop 1. On the countertop 1, you see a bread 1, and a mug 2."}],
    [{"role": "user", "content": "i need a long sleeve cotton shirt"}],
]


@pytest.fixture(scope="module")
def lively_model_dir(tiny_model_dir, tmp_path_factory):
    """The tiny model with larger random weights: its greedy output depends on the prompt (the freshly built
    one repeats a single whitespace token whatever it reads, which would hide padding mistakes)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.5)
    out = tmp_path_factory.mktemp("lively_model")
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(out)
    return out


def _cfg(model: str, **kw) -> BackendConfig:
    settings = dict(kind="transformers", model=model, temperature=0.0, max_tokens=12, concurrency=2,
                    max_retries=1, backoff_s=0.0)
    settings.update(kw)
    return BackendConfig(**settings)


def _reference_ids(model, tok, messages, max_new_tokens, eos_ids):
    """Greedy generation of one unpadded prompt, new tokens cut at the first EOS: the independent answer."""
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids = torch.tensor([tok(text, add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                             do_sample=False, eos_token_id=eos_ids, pad_token_id=tok.pad_token_id)
    row = out[0, ids.shape[1]:].tolist()
    return row[:next((k for k, t in enumerate(row) if t in eos_ids), len(row))]


def test_batched_left_padded_generation_matches_one_by_one(lively_model_dir):
    backend = make_backend(_cfg(str(lively_model_dir)))
    assert isinstance(backend, TransformersBackend)
    batched = backend.generate_ids(CONVERSATIONS)
    eos = [backend.tokenizer.eos_token_id]
    reference = [_reference_ids(backend.model, backend.tokenizer, m, 12, eos) for m in CONVERSATIONS]
    assert batched == reference
    assert len({tuple(r) for r in reference}) == 3, "outputs should differ by prompt"
    assert all(0 < len(row) <= 12 for row in batched)
    texts = backend.generate([ChatRequest(messages=m) for m in CONVERSATIONS])
    assert texts == [backend.tokenizer.decode(r, skip_special_tokens=True).strip() for r in reference]
    assert all(texts)
    assert backend.calls == 3 and backend.failures == 0 and backend.attempts == 3


@pytest.fixture()
def lively(lively_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(lively_model_dir), AutoTokenizer.from_pretrained(lively_model_dir)


def test_generation_stops_at_eos(lively):
    model, tok = lively
    backend = make_backend(_cfg("policy", max_tokens=10), policy_model=model, policy_tokenizer=tok)
    free = backend.generate_ids(CONVERSATIONS[:1])[0]
    assert len(free) == 10
    stop = free[4]
    cut = free.index(stop)
    backend.model.generation_config.eos_token_id = [backend.tokenizer.eos_token_id, stop]
    stopped = backend.generate_ids(CONVERSATIONS[:1])[0]
    assert cut > 0 and stopped == free[:cut]


def test_sampling_runs_with_temperature(lively):
    model, tok = lively
    backend = make_backend(_cfg("policy", temperature=1.0, max_tokens=6), policy_model=model, policy_tokenizer=tok)
    torch.manual_seed(0)
    rows = backend.generate_ids(CONVERSATIONS)
    assert all(0 < len(r) <= 6 for r in rows)


def test_self_analyzer_mode_reuses_the_policy_and_restores_it(lively):
    model, tok = lively
    model.train()
    tok.padding_side = "right"
    backend = make_backend(_cfg("policy", max_tokens=4), policy_model=model, policy_tokenizer=tok)
    assert backend.model is model
    out = backend.generate([ChatRequest(messages=m) for m in CONVERSATIONS])
    assert len(out) == 3 and all(isinstance(t, str) and t for t in out)
    assert model.training and tok.padding_side == "right"


def test_policy_mode_needs_the_policy():
    with pytest.raises(ValueError, match="policy_model="):
        make_backend(_cfg("policy"))


def test_missing_model_folder_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="analyzer.model=.*not a local model folder"):
        make_backend(_cfg(str(tmp_path / "nope")))


def test_generation_errors_and_empty_replies_are_retried_then_counted(tiny_model, tiny_tokenizer, monkeypatch):
    backend = make_backend(_cfg("policy", max_retries=2), policy_model=tiny_model, policy_tokenizer=tiny_tokenizer)
    calls = []

    def flaky(conversations, max_tokens=None, constrained=False):
        calls.append(len(conversations))
        if len(calls) == 1:
            raise RuntimeError("CUDA out of memory (injected)")
        return ["" if "cotton" in c[-1]["content"] else "ok" for c in conversations]

    monkeypatch.setattr(backend, "generate_texts", flaky)
    out = asyncio.run(backend.agenerate([ChatRequest(messages=m) for m in CONVERSATIONS]))
    assert out == ["ok", "ok", None]
    # attempt 1: batches of 2 (raised) + 1 (empty); attempt 2: all three again; attempt 3: the empty one
    assert calls == [2, 1, 2, 1, 1]
    assert backend.failures == 1 and backend.attempts == 7 and backend.retries == 4
    assert "empty output" in backend.last_error


def test_a_request_budget_caps_new_tokens(lively):
    model, tok = lively
    backend = make_backend(_cfg("policy", max_tokens=10), policy_model=model, policy_tokenizer=tok)
    assert len(backend.generate_ids(CONVERSATIONS[:1], 3)[0]) == 3
    asked = []
    original = backend.generate_texts

    def recording(conversations, max_tokens=None, constrained=False):
        asked.append(max_tokens)
        return original(conversations, max_tokens)

    backend.generate_texts = recording
    backend.generate([ChatRequest(messages=CONVERSATIONS[0], max_tokens=4), ChatRequest(messages=CONVERSATIONS[1])])
    assert asked == [10]  # one batch: the largest budget in it, capped by max_tokens
    backend.generate([ChatRequest(messages=CONVERSATIONS[0], max_tokens=4)])
    assert asked[-1] == 4
