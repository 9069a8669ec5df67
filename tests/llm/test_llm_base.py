"""The backend interface: dispatch, backoff schedule, retry/failure accounting, concurrency, sync-in-loop."""

from __future__ import annotations

import asyncio
import random

import pytest

from skillduet_plugin.config import BackendConfig, ConfigError
from skillduet_plugin.llm import ChatBackend, ChatRequest, PermanentError, RetryableError, make_backend
from skillduet_plugin.llm.base import MAX_BACKOFF_S, backoff_delay
from skillduet_testing.fault_backends import FlakyBackend, FunctionBackend
from skillduet_plugin.llm.offline import OfflineBackend


def _req(text: str, payload=None) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": text}], payload=payload)


def test_make_backend_dispatch_and_validation():
    assert isinstance(make_backend(BackendConfig()), OfflineBackend)
    assert make_backend(BackendConfig(), role="synthesizer").role == "synthesizer"
    with pytest.raises(ConfigError, match="synthesizer.model"):
        make_backend(BackendConfig(kind="openai", model=""), role="synthesizer")
    with pytest.raises(ConfigError, match="analyzer.kind"):
        make_backend(BackendConfig(kind="vllm"))
    with pytest.raises(TypeError, match="cfg must be a BackendConfig"):
        make_backend({"kind": "offline"})


def test_backoff_is_exponential_with_bounded_jitter():
    rng = random.Random(0)
    for attempt in range(5):
        delays = [backoff_delay(attempt, 0.1, rng) for _ in range(200)]
        assert min(delays) >= 0.1 * 2 ** attempt
        assert max(delays) < 0.15 * 2 ** attempt
        assert len(set(delays)) > 100  # jittered
    assert backoff_delay(0, 0.1, rng, retry_after=3.0) == 3.0
    assert backoff_delay(30, 1.0, rng) == MAX_BACKOFF_S
    assert backoff_delay(0, 0.1, rng, retry_after=1e6) == MAX_BACKOFF_S


class _Scripted(ChatBackend):
    """Fails each request's first ``fails[text]`` attempts with the given exception type."""

    kind = "scripted"

    def __init__(self, fails: dict[str, tuple[int, type]], **cfg) -> None:
        super().__init__(BackendConfig(backoff_s=0.0, **cfg))
        self.fails = fails
        self.seen: dict[str, int] = {}
        self.inflight = 0
        self.max_inflight = 0

    async def _complete(self, request: ChatRequest) -> str:
        text = request.messages[-1]["content"]
        self.seen[text] = self.seen.get(text, 0) + 1
        self.inflight += 1
        self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            await asyncio.sleep(0.01)
            n, exc = self.fails.get(text, (0, RetryableError))
            if self.seen[text] <= n:
                if exc is str:
                    return "   "
                raise exc(f"injected for {text}")
            return f"answer {text}"
        finally:
            self.inflight -= 1


def test_retry_accounting_per_request():
    backend = _Scripted({"a": (2, RetryableError), "b": (9, RetryableError), "c": (1, PermanentError),
                         "d": (1, str), "e": (1, KeyError)}, max_retries=3)
    out = backend.generate([_req(t) for t in "abcdef"])
    assert out == ["answer a", None, None, "answer d", None, "answer f"]
    assert backend.seen == {"a": 3, "b": 4, "c": 1, "d": 2, "e": 1, "f": 1}
    s = backend.stats()
    assert (s["calls"], s["attempts"], s["retries"], s["failures"]) == (6, 12, 6, 3)


def test_concurrency_is_bounded_per_backend():
    backend = _Scripted({}, concurrency=3)
    out = backend.generate([_req(str(i)) for i in range(10)])
    assert out == [f"answer {i}" for i in range(10)]
    assert backend.max_inflight == 3


def test_generate_inside_a_running_loop_and_concurrent_agenerate_calls():
    backend = _Scripted({}, concurrency=2)

    async def caller():
        sync = backend.generate([_req("sync")])
        a, b = await asyncio.gather(backend.agenerate([_req("x"), _req("y")]), backend.agenerate([_req("z")]))
        return sync, a, b

    assert asyncio.run(caller()) == (["answer sync"], ["answer x", "answer y"], ["answer z"])
    assert backend.max_inflight == 2  # the limit holds across concurrent agenerate calls on one loop


def test_flaky_wrapper_injects_retryable_faults():
    inner = FunctionBackend(lambda r: f"ok {r.messages[-1]['content']}")
    # attempts: a=1, b=2, c=3 (injected), c again=4
    flaky = FlakyBackend(inner, fail_every=3, config=BackendConfig(max_retries=1, backoff_s=0.0))
    assert flaky.generate([_req("a"), _req("b"), _req("c")]) == ["ok a", "ok b", "ok c"]
    assert flaky.injected == 1 and flaky.retries == 1 and flaky.failures == 0

    always = FlakyBackend(inner, fail_if=lambda r: "bad" in r.messages[-1]["content"],
                          config=BackendConfig(max_retries=2, backoff_s=0.0))
    assert always.generate([_req("good"), _req("bad")]) == ["ok good", None]
    assert always.failures == 1 and always.injected == 3

    first = FlakyBackend(OfflineBackend(), fail_first=1, config=BackendConfig(max_retries=0, backoff_s=0.0))
    payload = {"kind": "compress", "scope": "s", "items": ["a b c"], "target_items": 1}
    assert first.generate([_req("x", payload), _req("y", payload)]) == [None, "<global>\n- a b c\n</global>"]


def test_function_backend_none_is_retried_then_failed():
    backend = FunctionBackend(lambda r: None, BackendConfig(max_retries=2, backoff_s=0.0))
    assert backend.generate([_req("q")]) == [None]
    assert backend.attempts == 3 and backend.failures == 1
    with pytest.raises(ValueError, match="fail_every"):
        FlakyBackend(backend, fail_every=-1)
