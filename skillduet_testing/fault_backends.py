"""Test doubles: a backend that injects faults into another, and one that answers with a plain function.

They let skill-lifecycle tests exercise retries and failure counting without an HTTP server.
"""

from __future__ import annotations

import threading
from typing import Callable

from skillduet_plugin.llm.base import ChatBackend, ChatRequest, PermanentError, RetryableError
from skillduet_plugin.llm.config import BackendConfig


class FlakyBackend(ChatBackend):
    """Wraps ``inner`` and makes some attempts fail with a retryable fault.

    Args:
        inner: a backend whose single attempts run standalone (offline, transformers, :class:`FunctionBackend`).
        fail_every: every ``fail_every``-th attempt (1-based, counted over this wrapper) fails; 0 disables.
        fail_first: the first ``fail_first`` attempts fail.
        fail_if: requests for which *every* attempt fails (they end as ``None`` and count as failures).
        config: retry/concurrency settings of the wrapper (default: ``inner.config``).
    """

    kind = "flaky"

    def __init__(self, inner: ChatBackend, *, fail_every: int = 0, fail_first: int = 0,
                 fail_if: Callable[[ChatRequest], bool] | None = None, config: BackendConfig | None = None,
                 role: str | None = None) -> None:
        if fail_every < 0 or fail_first < 0:
            raise ValueError(f"fail_every={fail_every} and fail_first={fail_first} must be >= 0")
        super().__init__(config if config is not None else inner.config, role=role or inner.role)
        self.inner = inner
        self.fail_every = fail_every
        self.fail_first = fail_first
        self.fail_if = fail_if
        self.injected = 0
        self._seen = 0
        self._seen_lock = threading.Lock()

    async def _complete(self, request: ChatRequest) -> str:
        with self._seen_lock:
            self._seen += 1
            n = self._seen
        if (n <= self.fail_first or (self.fail_every and n % self.fail_every == 0)
                or (self.fail_if is not None and self.fail_if(request))):
            with self._seen_lock:
                self.injected += 1
            raise RetryableError(f"injected fault on attempt {n}")
        return await self.inner._complete(request)


class FunctionBackend(ChatBackend):
    """Answers each request with ``fn(request)``; ``None`` or ``""`` from ``fn`` is an empty (retried) reply."""

    kind = "function"

    def __init__(self, fn: Callable[[ChatRequest], str | None], config: BackendConfig | None = None, *,
                 role: str = "analyzer") -> None:
        super().__init__(config, role=role)
        self.fn = fn

    async def _complete(self, request: ChatRequest) -> str:
        text = self.fn(request)
        if text is None:
            raise RetryableError("function returned None")
        if not isinstance(text, str):
            raise PermanentError(f"function returned {type(text).__name__}, expected str")
        return text
