"""The one interface every analyzer/synthesizer backend implements, with retries, backoff and failure counting.

A backend turns chat requests into text. Server faults (timeouts, connection errors, 5xx, 429, empty or
unparsable replies) are retried with exponential backoff and jitter; a request that still fails yields
``None`` and is counted in ``failures``, so an analyzer outage never stops training. A reply that timed out is
final unless ``retry_timeouts`` (another attempt would regenerate it from the start).
"""

from __future__ import annotations

import abc
import asyncio
import concurrent.futures
import logging
import random
import re
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Sequence

from skillduet_plugin.core.settings import invalid
from skillduet_plugin.llm.config import BackendConfig
from skillduet_plugin.llm.registry import BACKENDS, register_backend

logger = logging.getLogger(__name__)

# Longest single wait between retries, whatever backoff_s or a server's Retry-After asks for.
MAX_BACKOFF_S = 60.0

_THINK_BLOCK = re.compile(r"^\s*<think>.*?</think>\s*", re.DOTALL)


@dataclass
class ChatRequest:
    """One chat completion to produce.

    Attributes:
        messages: OpenAI-style chat messages (``{"role": ..., "content": ...}``) for LLM backends.
        payload: structured description of the same request (trajectories, current Global...) that the
            deterministic offline backend works from; LLM backends ignore it.
    """

    messages: list[dict[str, str]]
    payload: dict[str, Any] | None = None
    #: the reply budget this request needs (a skill, a Global); LLM backends send
    #: ``min(max_tokens, config.max_tokens)``, so a slow server never generates more than the answer can use
    max_tokens: int | None = None
    #: the reply's fixed form (``llm.reply_form.SKILL_FORM`` for a Local skill), enforced where the backend's
    #: ``reply_form`` setting asks for it; None: free text
    form: str | None = None

    def reply_budget(self, cap: int) -> int:
        """Tokens to ask for: this request's own budget, at most ``cap`` (the backend's ``max_tokens``)."""
        return int(cap) if self.max_tokens is None else max(1, min(int(self.max_tokens), int(cap)))


class RetryableError(Exception):
    """A transient fault: worth another attempt after a backoff.

    ``retry_after`` is the server's own wait hint in seconds (HTTP ``Retry-After``), if it sent one.
    """

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class PermanentError(Exception):
    """A fault that another attempt cannot fix (e.g. HTTP 400, an unknown offline request kind)."""


class ReplyTimeout(Exception):
    """The server took the request but its reply did not arrive in ``timeout_s``.

    Final for that request unless ``config.retry_timeouts``: another attempt makes the server generate the whole
    reply again from the start, so on a slow server retries come in waves that each time out the same way.
    """


def strip_think(text: str) -> str:
    """Drop a leading ``<think>...</think>`` block that reasoning models put before their answer."""
    return _THINK_BLOCK.sub("", text, count=1)


def backoff_delay(attempt: int, base_s: float, rng: random.Random, retry_after: float | None = None) -> float:
    """Seconds to wait before retry number ``attempt + 1``: ``base * 2**attempt`` scaled by jitter in [1, 1.5),
    at least the server's ``retry_after``, capped at :data:`MAX_BACKOFF_S`."""
    delay = base_s * (2.0 ** attempt) * (1.0 + 0.5 * rng.random())
    if retry_after is not None and retry_after > 0:
        delay = max(delay, retry_after)
    return min(delay, MAX_BACKOFF_S)


class ChatBackend(abc.ABC):
    """Base class: subclasses implement :meth:`_complete` (one attempt at one request).

    ``generate``/``agenerate`` run a batch with at most ``config.concurrency`` requests in flight, retry each
    failed attempt up to ``config.max_retries`` times, and return one ``str | None`` per request in order.

    Counters: ``calls`` (requests handled), ``attempts`` (tries, retries included), ``retries``,
    ``failures`` (requests that returned None), ``timeouts`` (attempts whose reply did not arrive in time),
    ``completion_tokens`` and ``truncated`` (replies cut at their token budget) where the server reports them,
    ``constrained`` (replies decoded under a fixed form, ``config.reply_form``) and ``form_refusals`` (a server
    refused the form: asked again without it), ``last_error`` (text of the most recent fault).
    """

    kind = "base"
    #: ``model`` must be set for this kind (checked with the config, before any work).
    requires_model = False
    #: a language model writes the replies: lines it copied from the request are not advice
    #: (``skills.sanitize.drop_copied_lines``); False for rule-based backends that quote trajectories on purpose
    may_copy_prompt = True

    def __init__(self, config: BackendConfig | None = None, *, role: str = "analyzer") -> None:
        self.config = config if config is not None else BackendConfig()
        self.role = role
        self.calls = 0
        self.attempts = 0
        self.retries = 0
        self.failures = 0
        self.timeouts = 0
        self.completion_tokens = 0
        self.truncated = 0
        self.constrained = 0
        self.form_refusals = 0
        self.last_error: str | None = None
        self._lock = threading.Lock()
        self._rng = random.Random()
        # One semaphore per event loop: asyncio primitives are bound to the loop that first uses them.
        self._semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary())

    # ------------------------------------------------------------------ subclass hooks
    @classmethod
    def check_config(cls, config: BackendConfig, prefix: str) -> None:
        """Kind-specific checks of ``config`` (one-line ConfigError); the default checks ``requires_model``."""
        if cls.requires_model and not config.model:
            invalid(f"{prefix}.model", config.model, f"a model name is required when {prefix}.kind={cls.kind!r}")

    @classmethod
    def from_config(cls, config: BackendConfig, *, role: str, policy_model: Any = None,
                    policy_tokenizer: Any = None) -> "ChatBackend":
        """Build from a validated config; only backends that can reuse the policy look at ``policy_*``."""
        return cls(config, role=role)

    @abc.abstractmethod
    async def _complete(self, request: ChatRequest) -> str:
        """One attempt. Return the text; raise :class:`RetryableError` or :class:`PermanentError` on faults."""

    # ------------------------------------------------------------------ public API
    async def agenerate(self, requests: Sequence[ChatRequest]) -> list[str | None]:
        """Answer ``requests`` concurrently (bounded by ``config.concurrency``); ``None`` where one failed."""
        requests = check_requests(requests)
        if not requests:
            return []
        return list(await asyncio.gather(*(self._run_one(r) for r in requests)))

    def generate(self, requests: Sequence[ChatRequest]) -> list[str | None]:
        """Synchronous :meth:`agenerate`. Inside a running event loop it runs on a helper thread's own loop."""
        requests = check_requests(requests)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.agenerate(requests))
        with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="skillduet-llm") as pool:
            return pool.submit(lambda: asyncio.run(self.agenerate(requests))).result()

    def stats(self) -> dict[str, Any]:
        """Counters for the training metrics (``llm/<role>/...``)."""
        with self._lock:
            return {"kind": self.kind, "role": self.role, "calls": self.calls, "attempts": self.attempts,
                    "retries": self.retries, "failures": self.failures, "timeouts": self.timeouts,
                    "completion_tokens": self.completion_tokens, "truncated": self.truncated,
                    "constrained": self.constrained, "form_refusals": self.form_refusals,
                    "last_error": self.last_error}

    def close(self) -> None:
        """Release resources (models, clients). The default has none."""

    # ------------------------------------------------------------------ machinery
    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        with self._lock:
            sem = self._semaphores.get(loop)
            if sem is None:
                sem = asyncio.Semaphore(int(self.config.concurrency))
                self._semaphores[loop] = sem
            return sem

    def _count(self, **deltas: int) -> None:
        with self._lock:
            for name, delta in deltas.items():
                setattr(self, name, getattr(self, name) + delta)

    def _record_fault(self, message: str, *, final: bool) -> None:
        with self._lock:
            self.last_error = message
            if final:
                self.failures += 1

    async def _run_one(self, request: ChatRequest) -> str | None:
        self._count(calls=1)
        sem = self._semaphore()
        max_retries = int(self.config.max_retries)
        for attempt in range(max_retries + 1):
            retry_after: float | None = None
            async with sem:
                self._count(attempts=1)
                try:
                    text = await self._complete(request)
                    if not isinstance(text, str) or not text.strip():
                        raise RetryableError("empty output")
                    return text
                except RetryableError as exc:
                    message = f"{self.kind}/{self.role}: {exc}"
                    retry_after = exc.retry_after
                except ReplyTimeout as exc:
                    message = f"{self.kind}/{self.role}: {exc}"
                    self._count(timeouts=1)
                    if not self.config.retry_timeouts:
                        self._record_fault(message, final=True)
                        logger.warning("%s %s request timed out (not retried: retry_timeouts is off): %s",
                                       self.kind, self.role, exc)
                        return None
                except PermanentError as exc:
                    self._record_fault(f"{self.kind}/{self.role}: {exc}", final=True)
                    logger.warning("%s %s request failed permanently: %s", self.kind, self.role, exc)
                    return None
                except Exception as exc:  # noqa: BLE001 - a backend bug must not stop training either
                    self._record_fault(f"{self.kind}/{self.role}: {type(exc).__name__}: {exc}", final=True)
                    logger.exception("%s %s request raised unexpectedly", self.kind, self.role)
                    return None
            if attempt == max_retries:
                self._record_fault(message, final=True)
                logger.warning("%s %s request failed after %d attempt(s): %s", self.kind, self.role,
                               attempt + 1, message)
                return None
            self._record_fault(message, final=False)
            self._count(retries=1)
            # Sleep outside the semaphore so a backing-off request does not hold a slot.
            await asyncio.sleep(backoff_delay(attempt, float(self.config.backoff_s), self._rng, retry_after))
        return None  # unreachable: the loop returns on its last attempt


def check_requests(requests: Sequence[ChatRequest]) -> list[ChatRequest]:
    """The requests as a list; anything that is not a sequence of ChatRequest is a TypeError naming it."""
    if isinstance(requests, ChatRequest) or not isinstance(requests, Sequence):
        raise TypeError(f"requests must be a list of ChatRequest, got {type(requests).__name__}")
    for i, r in enumerate(requests):
        if not isinstance(r, ChatRequest):
            raise TypeError(f"requests[{i}] must be a ChatRequest, got {type(r).__name__}")
    return list(requests)


def make_backend(cfg: BackendConfig, *, role: str = "analyzer", policy_model: Any = None,
                 policy_tokenizer: Any = None) -> ChatBackend:
    """Build the backend registered under ``cfg.kind`` (``offline``, ``openai``, ``transformers`` or one added
    with :func:`~skillduet_plugin.llm.registry.register_backend`).

    ``policy_model``/``policy_tokenizer`` serve ``transformers`` with ``cfg.model == "policy"`` (the policy
    being trained analyses its own trajectories).
    """
    if not isinstance(cfg, BackendConfig):
        raise TypeError(f"cfg must be a BackendConfig, got {type(cfg).__name__}")
    cfg.validate(role)
    return BACKENDS.get(cfg.kind).from_config(cfg, role=role, policy_model=policy_model,
                                              policy_tokenizer=policy_tokenizer)


__all__ = ["BackendConfig", "ChatBackend", "ChatRequest", "PermanentError", "ReplyTimeout", "RetryableError",
           "backoff_delay",
           "check_requests", "make_backend", "register_backend", "strip_think"]
