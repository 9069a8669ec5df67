"""Teacher and scoring log-probs from verl's rollout servers (``skillduet.teacher_logprobs=rollout``).

A row ``(context, response)`` becomes one prefill request ``context + response`` with ``max_tokens=1`` and
``prompt_logprobs=0``, the request verl's own distillation teacher sends (``AsyncTeacherLLMServerManager``).
The server answers in vLLM's contract (verl's ``extract_prompt_logprobs``): entry ``j`` is
``[log p(seq[j+1] | seq[:j+1])]``, so response token ``k`` sits at ``len(context) + k - 1``, the same offset as
the actor's full-sequence output. The rollout replicas serve the current actor weights after every weight sync,
so this is the same teacher as the actor forward, without an FSDP pass. vLLM computes prompt log-probs from raw
logits (temperature 1): the trainer refuses the option when ``rollout.temperature`` is not 1.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any, Awaitable, Mapping, Sequence, TypeVar
from uuid import uuid4

import torch

from skillduet_plugin.core.opd import opd_loss

#: What verl's distillation teacher sends (``_get_teacher_sampling_params`` with top-k off).
PREFILL_PARAMS = {"max_tokens": 1, "temperature": 1.0, "prompt_logprobs": 0, "detokenize": False}

T = TypeVar("T")


def response_slice(prompt_logprobs: Sequence[Sequence[float]], context_len: int, response_len: int) -> torch.Tensor:
    """The response tokens' log-probs from a prefill's ``prompt_logprobs`` (one ``[value]`` per position)."""
    if len(prompt_logprobs) != context_len + response_len:
        raise ValueError(f"the server returned {len(prompt_logprobs)} prompt log-probs for a sequence of "
                         f"{context_len + response_len} tokens: does the rollout backend support prompt_logprobs?")
    start = context_len - 1
    return torch.tensor([float(v[0]) for v in prompt_logprobs[start: start + response_len]], dtype=torch.float32)


async def prefill_logprobs(client: Any, context: Sequence[int], response: Sequence[int]) -> torch.Tensor:
    """log p(response | context) from one prefill request through verl's ``LLMServerClient``."""
    if not context or not response:
        raise ValueError(f"a prefill row needs a context and a response (got {len(context)} and {len(response)} "
                         "tokens)")
    output = await client.generate(uuid4().hex, prompt_ids=list(map(int, context)) + list(map(int, response)),
                                   sampling_params=dict(PREFILL_PARAMS))
    values = (output.extra_fields or {}).get("prompt_logprobs")
    if values is None:
        raise RuntimeError("the rollout server returned no prompt_logprobs: the backend does not support the "
                           "prefill request; set skillduet.teacher_logprobs=actor")
    return response_slice(values, len(context), len(response))


async def _gather(client: Any, contexts, responses) -> list[torch.Tensor]:
    return list(await asyncio.gather(*[prefill_logprobs(client, c, r) for c, r in zip(contexts, responses)]))


def run_coroutine(coro: Awaitable[T]) -> T:
    """Run ``coro`` to completion from sync code, also when the caller already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


class BackgroundLoop:
    """An event loop on a daemon thread: coroutines submitted from sync code run while the caller goes on
    (per-group teacher prefills issued during the rollout, collected after it)."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def submit(self, coro: Awaitable[T]) -> "concurrent.futures.Future[T]":
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever, name="skillduet-prefill", daemon=True)
            self._thread.start()
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def close(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            if self._thread is not None:
                self._thread.join(timeout=5)
            self._loop.close()
            self._loop, self._thread = None, None


async def gather_prefills(client: Any, contexts: Sequence[Sequence[int]],
                          responses: Sequence[Sequence[int]]) -> list[torch.Tensor]:
    """Every row's response log-probs, all requests in flight at once (a coroutine: see ``BackgroundLoop``)."""
    return await _gather(client, list(contexts), list(responses))


def server_response_logprobs(client: Any, contexts: Sequence[Sequence[int]],
                             responses: Sequence[Sequence[int]]) -> list[torch.Tensor]:
    """Every row's response log-probs, all requests in flight at once (the servers' load balancer spreads
    them over the replicas)."""
    if len(contexts) != len(responses):
        raise ValueError(f"{len(contexts)} contexts but {len(responses)} responses")
    if not contexts:
        return []
    return run_coroutine(_gather(client, list(contexts), list(responses)))


def max_abs_diff(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> float:
    """Largest per-token |a - b| over rows of equal lengths (0 for no rows)."""
    if len(a) != len(b):
        raise ValueError(f"{len(a)} rows against {len(b)}")
    gaps = [float((x.float() - y.float()).abs().max()) for x, y in zip(a, b) if x.numel()]
    return max(gaps, default=0.0)


def opd_loss_gap(student: Sequence[torch.Tensor], teacher_a: Sequence[torch.Tensor],
                 teacher_b: Sequence[torch.Tensor], masks: Sequence[torch.Tensor], supervised: Sequence[bool],
                 beta: float, agg: str = "token-mean") -> tuple[float, float]:
    """Eq. 1 over the supervised rows with the two teachers (student = the old log-probs, as in the step's
    first micro-batch); returns ``(loss_a, loss_b)``."""
    rows = [i for i, ok in enumerate(supervised) if ok]
    if not rows:
        return 0.0, 0.0
    width = max(int(student[i].numel()) for i in rows)

    def pad(values: Sequence[torch.Tensor]) -> torch.Tensor:
        out = torch.zeros(len(rows), width)
        for k, i in enumerate(rows):
            out[k, : values[i].numel()] = values[i].float()
        return out

    s, m = pad(student), pad(masks)
    loss_a, _ = opd_loss(s, pad(teacher_a), m, beta=beta, agg=agg)
    loss_b, _ = opd_loss(s, pad(teacher_b), m, beta=beta, agg=agg)
    return float(loss_a), float(loss_b)


def strength_gap(scores: Mapping[str, Mapping[str, Any]], reference: Mapping[str, Mapping[str, Any]]) -> dict:
    """Largest |Strength| and |Utility| gaps between two scorings of the same candidates (``inf`` when one
    side scored a candidate the other did not), and how many candidates were scored on both sides."""
    if set(scores) != set(reference):
        return {"strength_abs_diff": float("inf"), "utility_abs_diff": float("inf"), "scored_both": 0.0}
    out = {"strength_abs_diff": 0.0, "utility_abs_diff": 0.0, "scored_both": 0.0}
    for sid, values in scores.items():
        for key in ("strength", "utility"):
            a, b = values.get(key), reference[sid].get(key)
            if (a is None) != (b is None):
                gap = float("inf")
            else:
                gap = 0.0 if a is None else abs(float(a) - float(b))
            out[f"{key}_abs_diff"] = max(out[f"{key}_abs_diff"], gap)
        out["scored_both"] += float(values.get("strength") is not None and reference[sid].get("strength") is not None)
    return out


__all__ = ["BackgroundLoop", "PREFILL_PARAMS", "gather_prefills", "max_abs_diff", "opd_loss_gap", "prefill_logprobs",
           "response_slice", "run_coroutine", "server_response_logprobs", "strength_gap"]
