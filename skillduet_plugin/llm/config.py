"""``BackendConfig``: how to reach the analyzer or synthesizer LLM (one field language with every config)."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any, Mapping

from skillduet_plugin.core.settings import check, check_keys, invalid, setting, validate_fields
from skillduet_plugin.llm.registry import BACKENDS
from skillduet_plugin.llm.reply_form import REPLY_FORMS


@dataclass
class BackendConfig:
    """How to reach the analyzer or synthesizer LLM.

    ``offline`` is the deterministic rule-based backend (CPU runs, tests); ``openai`` is any
    OpenAI-compatible server (``vllm serve``, SGLang, a hosted API); ``transformers`` runs a model in process
    (``model="policy"`` reuses the policy being trained, the "self-analyzer" mode). Other kinds are registered
    with ``llm.register_backend``.
    """

    kind: str = setting("offline", "backend: offline (rules, CPU), openai (any OpenAI-compatible server) or "
                        "transformers (in process; model=policy reuses the policy)")
    model: str = setting("", "model name (openai) or folder (transformers); required for both")
    base_url: str = setting("http://127.0.0.1:8000/v1", "OpenAI-compatible endpoint (openai)")
    api_key_env: str = setting("OPENAI_API_KEY", "environment variable holding the API key (openai)")
    timeout_s: float = setting(120.0, "seconds per request before it counts as failed", lo=0, lo_open=True)
    retry_timeouts: bool = setting(False, "send a request again after its reply timed out; off because the server "
                                   "then generates the whole reply again from the start", kind="bool")
    max_retries: int = setting(3, "retries per request after a server fault", kind="int", lo=0)
    backoff_s: float = setting(1.0, "first retry delay in seconds (doubles per retry, with jitter)", lo=0)
    concurrency: int = setting(8, "requests in flight at once", kind="int", lo=1)
    temperature: float = setting(0.3, "sampling temperature", lo=0)
    reply_form: str = setting("free", "a Local skill reply's form: free, regex (enforced while decoding: vLLM "
                                      "structured outputs, xgrammar on transformers) or json_schema (openai only); a "
                                      "server that refuses it is asked without it", choices=REPLY_FORMS)
    max_tokens: int = setting(1024, "tokens per reply at most; each request asks for less when its answer needs "
                              "less (a Local skill: local_skill_token_budget, a Global: skill_token_budget, plus "
                              "room for the answer tags)", kind="int", lo=1)

    def validate(self, prefix: str) -> None:
        check(f"{prefix}.kind", self.kind, choices=BACKENDS.names())
        validate_fields(self, f"{prefix}.")
        BACKENDS.get(self.kind).check_config(self, prefix)

    @property
    def api_key(self) -> str:
        return os.environ.get(self.api_key_env, "EMPTY")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], prefix: str) -> "BackendConfig":
        """Build from the ``prefix:`` mapping of a config (unknown keys named as ``prefix.key``)."""
        if not isinstance(data, Mapping):
            invalid(prefix, data, "expected a mapping of backend settings (kind, model, base_url, ...)")
        check_keys(prefix, data, [f.name for f in fields(cls)])
        return cls(**dict(data))


__all__ = ["BackendConfig"]
