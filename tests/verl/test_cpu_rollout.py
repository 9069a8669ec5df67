"""The test-only CPU rollout server in-process: sampled tokens come with the log-probs verl's actor would compute,
a weight load changes what it serves and the version it reports, and the backend is registered under ``hf``."""

from __future__ import annotations

import asyncio

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("verl")


def _server(model_dir):
    from skillduet_testing.verl_rollout import CPURolloutServer

    return CPURolloutServer(str(model_dir), response_length=8, seed=0)


def test_generate_returns_actor_log_probs_and_weight_version(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    from skillduet_plugin.core.logprobs import response_logprobs

    server = _server(tiny_model_dir)
    prompt = [5, 6, 7, 8, 9]
    out = asyncio.run(server.generate(prompt_ids=prompt, sampling_params={"temperature": 1.0, "max_tokens": 6},
                                      request_id="r"))
    assert 1 <= len(out.token_ids) <= 6 and len(out.log_probs) == len(out.token_ids)
    assert out.extra_fields == {"global_steps": None}
    reference = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    want = response_logprobs(reference, [prompt], [out.token_ids])[0]
    assert torch.allclose(torch.tensor(out.log_probs), want.detach(), atol=1e-5)

    # temperature scales the logits the log-probs come from, as in verl's actor
    hot = asyncio.run(server.generate(prompt_ids=prompt, sampling_params={"temperature": 2.0, "max_tokens": 4},
                                      request_id="r"))
    with torch.no_grad():
        logits = reference(input_ids=torch.tensor([prompt + hot.token_ids])).logits[0, len(prompt) - 1:-1]
    want_hot = torch.log_softmax(logits / 2.0, -1).gather(-1, torch.tensor(hot.token_ids)[:, None])[:, 0]
    assert torch.allclose(torch.tensor(hot.log_probs), want_hot, atol=1e-5)

    # a weight load replaces the served weights and the version reported with every output
    state = {k: v * 0.5 if v.is_floating_point() else v for k, v in reference.state_dict().items()}
    assert asyncio.run(server.load_weights(state, 3))["loaded"] == len(state)
    again = asyncio.run(server.generate(prompt_ids=prompt, sampling_params={"temperature": 1.0, "max_tokens": 6},
                                        request_id="r"))
    assert again.extra_fields == {"global_steps": 3}
    reference.load_state_dict(state)
    want = response_logprobs(reference, [prompt], [again.token_ids])[0]
    assert torch.allclose(torch.tensor(again.log_probs), want.detach(), atol=1e-5)
    # None keeps the weights (the negative control) but still moves the version on
    assert asyncio.run(server.load_weights(None, 4))["loaded"] == 0
    assert asyncio.run(server.stats()) == {"global_steps": 4, "weight_loads": 1}
    with pytest.raises(RuntimeError, match="unexpected"):
        asyncio.run(server.load_weights({"not.a.weight": torch.zeros(1)}, 5))


def test_backend_registered_for_replica_and_worker():
    from verl.workers.rollout.base import get_rollout_class
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    from skillduet_testing.verl_rollout import NAME, CPURolloutAdapter, CPURolloutReplica

    assert NAME == "hf"
    assert RolloutReplicaRegistry.get(NAME) is CPURolloutReplica
    assert get_rollout_class(NAME, "async") is CPURolloutAdapter
