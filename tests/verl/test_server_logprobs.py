"""Teacher/scoring log-probs from the rollout server (``skillduet.teacher_logprobs=rollout``): the test-only CPU
server's prefill answers in vLLM's prompt_logprobs contract, and the response slice equals the actor-style
log-probs of ``core.logprobs.response_logprobs`` on the same weights."""

from __future__ import annotations

import asyncio

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("verl")

from skillduet_plugin.integrations.verl.server_logprobs import (PREFILL_PARAMS, max_abs_diff,  # noqa: E402
                                                                opd_loss_gap, response_slice, run_coroutine,
                                                                server_response_logprobs, strength_gap)


class ServerClient:
    """verl's ``LLMServerClient.generate`` signature, straight onto one in-process CPU server."""

    def __init__(self, server):
        self.server, self.params = server, []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        self.params.append(dict(sampling_params))
        if self.server._lock._loop is not asyncio.get_running_loop():
            # in Ray the server lives in one event loop; each asyncio.run here is a new loop
            self.server._lock = asyncio.Lock()
        return await self.server.generate(prompt_ids=prompt_ids, sampling_params=sampling_params,
                                          request_id=request_id)


def test_cpu_server_prefill_equals_actor_logprobs(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    from skillduet_plugin.core.logprobs import response_logprobs
    from skillduet_testing.verl_rollout import CPURolloutServer

    server = CPURolloutServer(str(tiny_model_dir), response_length=8, seed=0)
    g = torch.Generator().manual_seed(0)
    contexts = [torch.randint(3, 900, (n,), generator=g).tolist() for n in (1, 7, 23)]
    responses = [torch.randint(3, 900, (n,), generator=g).tolist() for n in (5, 1, 17)]
    client = ServerClient(server)
    got = server_response_logprobs(client, contexts, responses)
    assert client.params == [PREFILL_PARAMS] * 3  # verl's distillation-teacher request

    reference = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    with torch.no_grad():
        want = response_logprobs(reference, contexts, responses)
    assert [len(x) for x in got] == [5, 1, 17]
    assert max_abs_diff(got, want) < 1e-5
    # negative controls: the slice one position off, or another temperature, is far from the actor's values
    raw = asyncio.run(server.generate(prompt_ids=contexts[2] + responses[2], sampling_params=PREFILL_PARAMS,
                                      request_id="r")).extra_fields["prompt_logprobs"]
    assert len(raw) == len(contexts[2]) + len(responses[2]) and raw[-1] == [0.0]
    shifted = torch.tensor([v[0] for v in raw[len(contexts[2]): len(contexts[2]) + 17]])
    assert (shifted - want[2]).abs().max() > 1e-2
    with torch.no_grad():
        hot = response_logprobs(reference, contexts, responses, temperature=2.0)
    assert max_abs_diff(got, hot) > 1e-2

    # after a weight load the prefill serves the new weights
    state = {k: v * 0.5 if v.is_floating_point() else v for k, v in reference.state_dict().items()}
    asyncio.run(server.load_weights(state, 1))
    reference.load_state_dict(state)
    with torch.no_grad():
        new_want = response_logprobs(reference, contexts, responses)
    new_got = server_response_logprobs(client, contexts, responses)
    assert max_abs_diff(new_got, new_want) < 1e-5 and max_abs_diff(new_got, got) > 1e-3


def test_response_slice_and_bad_server_output():
    values = [[-0.1], [-0.2], [-0.3], [-0.4], [0.0]]  # 5 tokens: context 2, response 3
    assert torch.allclose(response_slice(values, 2, 3), torch.tensor([-0.2, -0.3, -0.4]))
    with pytest.raises(ValueError, match="5 prompt log-probs for a sequence of 6 tokens"):
        response_slice(values, 3, 3)

    class NoPromptLogprobs:
        async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
            from verl.workers.rollout.replica import TokenOutput

            return TokenOutput(token_ids=[1], log_probs=[0.0], extra_fields={"global_steps": 1})

    with pytest.raises(RuntimeError, match="teacher_logprobs=actor"):
        server_response_logprobs(NoPromptLogprobs(), [[1, 2]], [[3]])
    with pytest.raises(ValueError, match="needs a context and a response"):
        server_response_logprobs(NoPromptLogprobs(), [[]], [[3]])
    assert server_response_logprobs(NoPromptLogprobs(), [], []) == []


def test_run_coroutine_inside_a_running_loop():
    async def value():
        return 7

    async def outer():
        return run_coroutine(value())  # a sync caller inside an event loop (e.g. an async Ray actor)

    assert run_coroutine(value()) == 7 and asyncio.run(outer()) == 7


def test_opd_loss_gap_and_strength_gap_hand_computed():
    student = [torch.tensor([-1.0, -2.0]), torch.tensor([-1.0])]
    teacher = [torch.tensor([-1.0, -1.0]), torch.tensor([-5.0])]
    masks = [torch.tensor([1, 1]), torch.tensor([1])]
    same, other = opd_loss_gap(student, teacher, teacher, masks, [True, False], beta=5.0)
    # row 0 only: gates sigmoid(0)=0.5 and sigmoid(5); terms 0 and sigmoid(5) * 1, mean over 2 tokens
    assert same == other == pytest.approx(float(torch.sigmoid(torch.tensor(5.0))) / 2, abs=1e-6)
    shifted = [t + 1e-3 for t in teacher]
    a, b = opd_loss_gap(student, teacher, shifted, masks, [True, False], beta=5.0)
    assert abs(a - b) > 1e-4
    assert opd_loss_gap(student, teacher, teacher, masks, [False, False], beta=5.0) == (0.0, 0.0)

    gap = strength_gap({"a": {"strength": 0.5, "utility": 1.0}, "b": {"strength": None, "utility": None}},
                       {"a": {"strength": 0.25, "utility": 1.0}, "b": {"strength": None, "utility": None}})
    assert gap == {"strength_abs_diff": 0.25, "utility_abs_diff": 0.0, "scored_both": 1.0}
    assert strength_gap({"a": {"strength": 0.5}}, {"a": {"strength": None}})["strength_abs_diff"] == float("inf")
    assert strength_gap({"a": {}}, {"b": {}})["strength_abs_diff"] == float("inf")
