"""Analyzer and synthesizer LLM backends behind one small interface.

``make_backend(cfg)`` builds the backend registered under ``cfg.kind``: ``openai`` (any OpenAI-compatible server:
vLLM, SGLang, a hosted API), ``transformers`` (in process; ``model="policy"`` reuses the policy) or ``offline``
(deterministic rules, for CPU runs and tests); ``@register_backend("name")`` adds one. Every backend answers
``generate(requests) -> list[str | None]`` and never raises for server faults: failed requests are ``None`` and
counted in ``failures``.
"""

from skillduet_plugin.llm.base import (ChatBackend, ChatRequest, PermanentError, ReplyTimeout, RetryableError,
                                       make_backend, strip_think)
from skillduet_plugin.llm.config import BackendConfig
from skillduet_plugin.llm.registry import BACKENDS, register_backend

__all__ = ["BACKENDS", "BackendConfig", "ChatBackend", "ChatRequest", "PermanentError", "ReplyTimeout",
           "RetryableError", "make_backend", "register_backend", "strip_think"]
