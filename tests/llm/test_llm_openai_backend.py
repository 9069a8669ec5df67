"""The OpenAI-compatible backend against a fault-injecting loopback server: retries, failures, concurrency."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
from llm_fault_server import FaultServer

from skillduet_plugin.config import BackendConfig
from skillduet_plugin.llm import ChatRequest, make_backend
from skillduet_plugin.llm.openai_backend import OpenAIBackend


def _backend(server: FaultServer | None, **kw) -> OpenAIBackend:
    settings = dict(kind="openai", model="analyzer-27b", base_url=server.base_url if server else "",
                    api_key_env="SKILLDUET_TEST_KEY", timeout_s=0.4, max_retries=5, backoff_s=0.01,
                    concurrency=4, temperature=0.3, max_tokens=77)
    settings.update(kw)
    backend = make_backend(BackendConfig(**settings))
    assert isinstance(backend, OpenAIBackend)
    return backend


def _req(key: str) -> ChatRequest:
    return ChatRequest(messages=[{"role": "system", "content": "You analyse trajectories."},
                                 {"role": "user", "content": key}])


def test_every_fault_kind_is_retried_until_success():
    script = ["500", "429", "hang", "malformed", "empty", "nochoices", "503", "drop", "ok"]
    with FaultServer({"A": script}, hang_s=3.0) as server:
        backend = _backend(server, max_retries=len(script) - 1, backoff_s=0.001, retry_timeouts=True)
        start = time.monotonic()
        out = backend.generate([_req("A")])
        elapsed = time.monotonic() - start
    assert out == ["reply to A"]
    assert server.attempts["A"] == len(script)
    stats = backend.stats()
    assert (stats["calls"], stats["attempts"], stats["retries"], stats["failures"]) == (1, 9, 8, 0)
    # the hang was cut at the 0.4 s timeout, not waited out (3 s); backoffs add at most 0.001*255*1.5 s
    assert elapsed < 2.0


def test_permanent_failures_return_none_while_the_batch_succeeds():
    scripts = {"good": ["ok"], "down": ["500"], "flaky": ["429", "ok"], "bad-request": ["400"],
               "slow-down": ["hang"]}
    with FaultServer(scripts, hang_s=1.0) as server:
        backend = _backend(server, max_retries=2, timeout_s=0.3, retry_timeouts=True)
        out = backend.generate([_req(k) for k in scripts])
    assert out == ["reply to good", None, "reply to flaky", None, None]
    assert backend.failures == 3 and backend.calls == 5
    assert server.attempts == {"good": 1, "down": 3, "flaky": 2, "bad-request": 1, "slow-down": 3}
    assert "HTTP" in backend.stats()["last_error"] or "timeout" in backend.stats()["last_error"]


def test_a_timed_out_reply_is_final_by_default():
    # The server was generating when the wait ran out: another attempt would generate the whole reply again.
    with FaultServer({"slow": ["hang", "ok"], "fine": ["500", "ok"]}, hang_s=1.0) as server:
        backend = _backend(server, max_retries=3, timeout_s=0.3)
        out = backend.generate([_req("slow"), _req("fine")])
    assert out == [None, "reply to fine"]
    assert server.attempts == {"slow": 1, "fine": 2}  # negative control: a 500 is still retried
    stats = backend.stats()
    assert (stats["timeouts"], stats["failures"], stats["retries"]) == (1, 1, 1)
    assert "timeout" in stats["last_error"]


def test_a_connect_timeout_is_retried(monkeypatch):
    import httpx

    backend = _backend(None, base_url="http://127.0.0.1:9/v1", max_retries=2, backoff_s=0.001)
    calls = []

    async def refuse(self, url, **kw):
        calls.append(url)
        raise httpx.ConnectTimeout("connect timed out")

    monkeypatch.setattr(httpx.AsyncClient, "post", refuse)
    assert backend.generate([_req("x")]) == [None]
    assert len(calls) == 3 and backend.timeouts == 0 and backend.retries == 2


def test_each_request_asks_for_its_own_reply_budget():
    with FaultServer({"a": ["ok"], "b": ["ok"], "c": ["ok"]}) as server:
        backend = _backend(server, max_tokens=77)
        backend.generate([ChatRequest(_req("a").messages, max_tokens=20), ChatRequest(_req("b").messages),
                          ChatRequest(_req("c").messages, max_tokens=500)])
    asked = {b["messages"][-1]["content"]: b["max_tokens"] for b in server.bodies}
    assert asked == {"a": 20, "b": 77, "c": 77}  # the request's budget, capped by config.max_tokens


def test_usage_and_truncation_are_counted():
    import httpx

    from skillduet_plugin.llm.openai_backend import reply_usage

    def reply(body):
        return httpx.Response(200, json=body)

    full = {"choices": [{"message": {"content": "x"}, "finish_reason": "length"}], "usage": {"completion_tokens": 9}}
    assert reply_usage(reply(full)) == (9, True)
    assert reply_usage(reply({"choices": [{"message": {"content": "x"}, "finish_reason": "stop"}]})) == (0, False)
    assert reply_usage(httpx.Response(200, content=b"not json")) == (0, False)


def test_no_retries_when_max_retries_is_zero():
    with FaultServer({"x": ["500", "ok"]}) as server:
        backend = _backend(server, max_retries=0)
        assert backend.generate([_req("x")]) == [None]
    assert server.attempts["x"] == 1 and backend.failures == 1 and backend.retries == 0


def test_concurrency_limit_is_honoured_at_the_server():
    with FaultServer({f"k{i}": ["slow"] for i in range(12)}, slow_s=0.2) as server:
        backend = _backend(server, concurrency=3)
        out = backend.generate([_req(f"k{i}") for i in range(12)])
    assert out == [f"reply to k{i}" for i in range(12)]
    assert server.max_inflight == 3


def test_request_body_headers_and_api_key(monkeypatch):
    monkeypatch.setenv("SKILLDUET_TEST_KEY", "sk-local-123")
    with FaultServer() as server:
        backend = _backend(server)
        assert backend.generate([_req("hello")]) == ["reply to hello"]
    body = server.bodies[0]
    assert body == {"model": "analyzer-27b", "temperature": 0.3, "max_tokens": 77,
                    "messages": [{"role": "system", "content": "You analyse trajectories."},
                                 {"role": "user", "content": "hello"}]}
    assert server.headers_seen[0]["Authorization"] == "Bearer sk-local-123"


def test_api_key_defaults_to_empty(monkeypatch):
    monkeypatch.delenv("SKILLDUET_TEST_KEY", raising=False)
    with FaultServer() as server:
        _backend(server).generate([_req("k")])
    assert server.headers_seen[0]["Authorization"] == "Bearer EMPTY"


def test_leading_think_block_is_stripped():
    with FaultServer({"t": ["think"]}) as server:
        assert _backend(server).generate([_req("t")]) == ["<skill>\nx\n</skill>"]


def test_connection_refused_counts_as_failure():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    backend = _backend(None, base_url=f"http://127.0.0.1:{port}/v1", max_retries=2)
    assert backend.generate([_req("x"), _req("y")]) == [None, None]
    assert backend.failures == 2 and backend.attempts == 6
    assert "connection error" in backend.last_error


def test_sync_generate_inside_a_running_event_loop():
    with FaultServer() as server:
        backend = _backend(server)

        async def caller():
            return backend.generate([_req("in-loop")])

        assert asyncio.run(caller()) == ["reply to in-loop"]


def test_agenerate_and_repeated_generate_calls_share_counters():
    with FaultServer() as server:
        backend = _backend(server)
        assert asyncio.run(backend.agenerate([_req("a"), _req("b")])) == ["reply to a", "reply to b"]
        assert backend.generate([_req("c")]) == ["reply to c"]
        assert backend.generate([]) == []
    assert backend.calls == 3 and backend.failures == 0


def test_bad_requests_argument_raises_a_clear_error():
    backend = _backend(None, base_url="http://127.0.0.1:9/v1")
    with pytest.raises(TypeError, match="requests must be a list of ChatRequest"):
        backend.generate(_req("x"))
    with pytest.raises(TypeError, match=r"requests\[1\] must be a ChatRequest"):
        backend.generate([_req("x"), {"messages": []}])
