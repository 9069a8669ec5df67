"""OpenAI-compatible chat completions over HTTP: ``vllm serve``, SGLang, or any hosted API.

Uses ``httpx`` directly so every fault maps to exactly one decision: retry (connection error or connect timeout,
408, 429, 5xx, malformed or empty reply), give up (other 4xx), or a reply timeout (the server was generating:
final unless ``retry_timeouts``). Retries themselves live in :class:`ChatBackend`. Each request asks for its own
reply budget (``ChatRequest.max_tokens``, capped by ``max_tokens``); the server's ``usage.completion_tokens`` and
``finish_reason == "length"`` are counted (``completion_tokens``, ``truncated``). A Local skill request carries
its reply form when ``reply_form`` asks for it (``llm.reply_form``); a server that refuses it gets the request
again without it.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
from typing import Any, Sequence

import httpx

from skillduet_plugin.core.settings import invalid
from skillduet_plugin.llm.base import (ChatBackend, ChatRequest, PermanentError, ReplyTimeout, RetryableError,
                                       strip_think)
from skillduet_plugin.llm.config import BackendConfig
from skillduet_plugin.llm.registry import register_backend
from skillduet_plugin.llm.reply_form import SKILL_FORM, request_fields, skill_from_json

logger = logging.getLogger(__name__)

_RETRY_STATUS = frozenset({408, 409, 425, 429})

# The client of the agenerate call being served: tasks spawned by asyncio.gather inherit this context, and
# concurrent calls on other threads/loops each see their own client.
_CLIENT: contextvars.ContextVar[httpx.AsyncClient | None] = contextvars.ContextVar("skillduet_http_client",
                                                                                   default=None)


@register_backend("openai")
class OpenAIBackend(ChatBackend):
    """POSTs ``{base_url}/chat/completions`` with ``model``, ``messages``, ``temperature``, ``max_tokens``.

    The API key is read from the environment variable ``config.api_key_env`` (``"EMPTY"`` when unset, which
    is what local vLLM/SGLang servers accept). A leading ``<think>...</think>`` block is removed from replies.
    """

    kind = "openai"
    requires_model = True

    @classmethod
    def check_config(cls, config: BackendConfig, prefix: str) -> None:
        super().check_config(config, prefix)
        if not str(config.base_url).startswith(("http://", "https://")):
            invalid(f"{prefix}.base_url", config.base_url, "expected an http(s) URL such as http://host:8000/v1")

    def __init__(self, config: BackendConfig, *, role: str = "analyzer") -> None:
        super().__init__(config, role=role)
        self.url = str(config.base_url).rstrip("/") + "/chat/completions"

    def _client(self) -> httpx.AsyncClient:
        cfg = self.config
        limit = int(cfg.concurrency)
        return httpx.AsyncClient(
            timeout=httpx.Timeout(float(cfg.timeout_s)),
            limits=httpx.Limits(max_connections=limit, max_keepalive_connections=limit),
            headers={"Authorization": f"Bearer {cfg.api_key}", "Content-Type": "application/json"},
            trust_env=False,  # a proxy from the environment must not intercept a loopback/cluster server
        )

    async def agenerate(self, requests: Sequence[ChatRequest]) -> list[str | None]:
        if _CLIENT.get() is not None:
            return await super().agenerate(requests)
        async with self._client() as client:
            token = _CLIENT.set(client)
            try:
                return await super().agenerate(requests)
            finally:
                _CLIENT.reset(token)

    def constrains(self, request: ChatRequest) -> bool:
        """Whether ``request`` is sent with its reply form (``reply_form`` set, the server has not refused it)."""
        return request.form == SKILL_FORM and self.config.reply_form != "free" and not self.form_refusals

    def request_body(self, request: ChatRequest, *, constrained: bool | None = None) -> dict[str, Any]:
        cfg = self.config
        body = {"model": cfg.model, "messages": request.messages, "temperature": float(cfg.temperature),
                "max_tokens": request.reply_budget(int(cfg.max_tokens))}
        if self.constrains(request) if constrained is None else constrained:
            body.update(request_fields(cfg.reply_form))
        return body

    async def _complete(self, request: ChatRequest) -> str:
        constrained = self.constrains(request)
        try:
            text = await self._post(request, constrained)
        except PermanentError as exc:
            if not constrained:
                raise
            # Refused with the form (an unknown field, no structured-output backend): this request is sent again
            # at once without it; when that one is answered, the form was the problem and no later request
            # carries it.
            text = await self._post(request, False)
            self._count(form_refusals=1)
            logger.warning("%s %s: the server refused reply_form=%s (%s); sending requests without it",
                           self.kind, self.role, self.config.reply_form, exc)
            return text
        if constrained:
            self._count(constrained=1)
            return skill_from_json(text) if self.config.reply_form == "json_schema" else text
        return text

    async def _post(self, request: ChatRequest, constrained: bool) -> str:
        client = _CLIENT.get()
        if client is None:  # _complete is only reached through agenerate, which sets the client
            raise PermanentError("no HTTP client: call generate/agenerate")
        timeout = float(self.config.timeout_s)
        body = self.request_body(request, constrained=constrained)
        try:
            # httpx's timeout is per read; wait_for bounds the whole exchange (a server trickling bytes).
            response = await asyncio.wait_for(client.post(self.url, json=body), timeout=timeout)
        except httpx.ConnectTimeout:  # nothing was generated: another attempt costs the server nothing
            raise RetryableError(f"connect timeout after {timeout:g}s") from None
        except (asyncio.TimeoutError, httpx.TimeoutException) as exc:
            raise ReplyTimeout(f"timeout after {timeout:g}s ({type(exc).__name__})") from None
        except httpx.TransportError as exc:
            raise RetryableError(f"connection error: {type(exc).__name__}: {exc}") from None
        text = parse_chat_response(response)
        tokens, truncated = reply_usage(response)
        self._count(completion_tokens=tokens, truncated=int(truncated))
        return text


def parse_chat_response(response: httpx.Response) -> str:
    """The assistant text of a chat-completions reply, or the fault it represents."""
    status = response.status_code
    if status in _RETRY_STATUS or status >= 500:
        raise RetryableError(f"HTTP {status}: {_snippet(response)}", retry_after=_retry_after(response))
    if status >= 400:
        raise PermanentError(f"HTTP {status}: {_snippet(response)}")
    try:
        data = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError):
        raise RetryableError(f"malformed JSON reply: {_snippet(response)}") from None
    try:
        content = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise RetryableError(f"reply has no choices[0].message.content: {_snippet(response)}") from None
    if not isinstance(content, str) or not content.strip():
        raise RetryableError("empty content in reply")
    text = strip_think(content).strip()
    if not text:
        raise RetryableError("reply held only a <think> block")
    return text


def reply_usage(response: httpx.Response) -> tuple[int, bool]:
    """``(usage.completion_tokens, finish_reason == "length")`` of a parsed reply; ``(0, False)`` where the
    server does not report them."""
    try:
        data = response.json()
        tokens = int((data.get("usage") or {}).get("completion_tokens") or 0)
        return max(0, tokens), data["choices"][0].get("finish_reason") == "length"
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return 0, False


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff


def _snippet(response: httpx.Response, limit: int = 200) -> str:
    try:
        text = response.text
    except Exception:  # noqa: BLE001 - undecodable body
        return "<undecodable body>"
    text = " ".join(text.split())
    return text[:limit] + ("..." if len(text) > limit else "")
