"""In-process transformers analyzer: chat template + batched ``generate`` with left padding.

``config.model == "policy"`` reuses the policy being trained (the "self-analyzer" mode); any other value is a
local folder loaded offline with ``from_pretrained``. Requests are generated in batches of
``config.concurrency``; an empty reply or an exception (e.g. out of memory) is retried for the affected
requests, then counted as a failure, as for every backend. With ``reply_form=regex`` a batch of Local skill
requests is decoded under the skill's fixed form (xgrammar's logits processor: ``llm.reply_form``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from pathlib import Path
from typing import Any, Iterator, Sequence

from skillduet_plugin.core.settings import invalid
from skillduet_plugin.llm.base import ChatBackend, ChatRequest, backoff_delay, check_requests, strip_think
from skillduet_plugin.llm.config import BackendConfig
from skillduet_plugin.llm.registry import register_backend
from skillduet_plugin.llm.reply_form import SKILL_FORM, GrammarCache

logger = logging.getLogger(__name__)


@register_backend("transformers")
class TransformersBackend(ChatBackend):
    """A causal LM generating replies in process.

    Args:
        config: ``model`` is ``"policy"`` or a local model folder; ``max_tokens`` caps new tokens per reply;
            ``temperature`` 0 means greedy decoding; ``concurrency`` is the generation batch size.
        policy_model / policy_tokenizer: required when ``config.model == "policy"``.
    """

    kind = "transformers"
    requires_model = True

    @classmethod
    def check_config(cls, config: BackendConfig, prefix: str) -> None:
        super().check_config(config, prefix)
        if config.reply_form == "json_schema":
            invalid(f"{prefix}.reply_form", config.reply_form, "json_schema is an OpenAI server's response_format; "
                    "the transformers backend enforces the form with reply_form=regex")

    @classmethod
    def from_config(cls, config: BackendConfig, *, role: str, policy_model: Any = None,
                    policy_tokenizer: Any = None) -> "TransformersBackend":
        return cls(config, role=role, policy_model=policy_model, policy_tokenizer=policy_tokenizer)

    def __init__(self, config: BackendConfig, *, role: str = "analyzer", policy_model: Any = None,
                 policy_tokenizer: Any = None) -> None:
        super().__init__(config, role=role)
        if config.model == "policy":
            if policy_model is None or policy_tokenizer is None:
                raise ValueError(f"{role}.model='policy' needs the policy: pass policy_model= and "
                                 "policy_tokenizer= to make_backend (or set a local model folder)")
            self.model, self.tokenizer = policy_model, policy_tokenizer
            self.owns_model = False
        else:
            self.model, self.tokenizer = _load(config.model, role)
            self.owns_model = True
        # One generate at a time per model: concurrent agenerate calls must not interleave eval/train toggles.
        self._generate_lock = threading.Lock()
        self._grammar: GrammarCache | None = None

    def _constrains(self, requests: Sequence[ChatRequest]) -> bool:
        """Whether a batch is decoded under the Local skill form (``reply_form=regex``, every request asks it)."""
        return self.config.reply_form == "regex" and all(r.form == SKILL_FORM for r in requests)

    async def _complete(self, request: ChatRequest) -> str:
        return (await asyncio.to_thread(self.generate_texts, [request.messages],
                                        request.reply_budget(int(self.config.max_tokens)),
                                        self._constrains([request])))[0]

    async def agenerate(self, requests: Sequence[ChatRequest]) -> list[str | None]:
        """Batched generation; each request is retried on its own if its reply was empty or its batch raised."""
        requests = check_requests(requests)
        self._count(calls=len(requests))
        results: list[str | None] = [None] * len(requests)
        pending = list(range(len(requests)))
        batch_size = int(self.config.concurrency)
        for attempt in range(int(self.config.max_retries) + 1):
            failed: list[int] = []
            for start in range(0, len(pending), batch_size):
                chunk = pending[start:start + batch_size]
                self._count(attempts=len(chunk))
                budget = max(requests[i].reply_budget(int(self.config.max_tokens)) for i in chunk)
                constrained = self._constrains([requests[i] for i in chunk])
                try:
                    texts = await asyncio.to_thread(self.generate_texts, [requests[i].messages for i in chunk],
                                                    budget, constrained)
                    self._count(constrained=len(chunk) * constrained)
                except Exception as exc:  # noqa: BLE001 - e.g. CUDA OOM: retry, never stop training
                    logger.warning("transformers %s batch of %d failed: %s", self.role, len(chunk), exc)
                    self._record_fault(f"transformers/{self.role}: {type(exc).__name__}: {exc}", final=False)
                    failed.extend(chunk)
                    continue
                for i, text in zip(chunk, texts):
                    if text.strip():
                        results[i] = text
                    else:
                        self._record_fault(f"transformers/{self.role}: empty output", final=False)
                        failed.append(i)
            pending = failed
            if not pending:
                break
            if attempt < int(self.config.max_retries):
                self._count(retries=len(pending))
                await asyncio.sleep(backoff_delay(attempt, float(self.config.backoff_s), self._rng))
        for _ in pending:
            self._record_fault(self.last_error or f"transformers/{self.role}: failed", final=True)
        return results

    # ------------------------------------------------------------------ generation
    def generate_texts(self, conversations: Sequence[list[dict[str, str]]],
                       max_tokens: int | None = None, constrained: bool = False) -> list[str]:
        """Generate one reply per conversation (decoded new tokens only, cut at the first EOS)."""
        return [strip_think(self.tokenizer.decode(ids, skip_special_tokens=True)).strip()
                for ids in self.generate_ids(conversations, max_tokens, constrained)]

    def grammar(self) -> GrammarCache:
        """The Local skill form compiled for this tokenizer (once)."""
        if self._grammar is None:
            vocab = int(getattr(self.model.config, "vocab_size", 0) or len(self.tokenizer))
            self._grammar = GrammarCache(self.tokenizer, vocab, _eos_ids(self.model, self.tokenizer))
        return self._grammar

    def generate_ids(self, conversations: Sequence[list[dict[str, str]]],
                     max_tokens: int | None = None, constrained: bool = False) -> list[list[int]]:
        """New token ids per conversation, cut before the first EOS (at most ``max_tokens``, default
        ``config.max_tokens``, each); ``constrained``: decoded under the Local skill form
        (``llm.reply_form.SKILL_REGEX``, xgrammar's logits processor)."""
        import torch  # lazy: torch

        tok, model = self.tokenizer, self.model
        prompts = [tok.apply_chat_template(list(m), tokenize=False, add_generation_prompt=True)
                   for m in conversations]
        eos_ids = _eos_ids(model, tok)
        greedy = float(self.config.temperature) <= 0
        with self._generate_lock, _padding_left(tok), _eval_mode(model), torch.no_grad():
            pad_id = tok.pad_token_id if tok.pad_token_id is not None else eos_ids[0]
            enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
            device = _device_of(model)
            input_ids = enc["input_ids"].to(device)
            attention_mask = enc["attention_mask"].to(device)
            new_tokens = int(self.config.max_tokens) if max_tokens is None else int(max_tokens)
            kwargs: dict[str, Any] = dict(max_new_tokens=new_tokens, eos_token_id=eos_ids,
                                          pad_token_id=pad_id, do_sample=not greedy)
            if greedy:
                # A model's own generation_config may carry sampling knobs; neutralise them for greedy.
                kwargs.update(temperature=None, top_p=None, top_k=None)
            else:
                kwargs["temperature"] = float(self.config.temperature)
            if constrained:
                kwargs["logits_processor"] = [self.grammar().processor()]
            out = model.generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        # Left padding puts every prompt's end at the same column: new tokens start right after it.
        rows = out[:, input_ids.shape[1]:].tolist()
        return [row[:next((k for k, t in enumerate(row) if t in eos_ids), len(row))] for row in rows]

    def close(self) -> None:
        if self.owns_model:
            self.model = None
            self.tokenizer = None


def _load(path: str, role: str):

    import torch  # lazy: torch
    from transformers import AutoModelForCausalLM, AutoTokenizer  # lazy: transformers

    if not Path(path).is_dir():
        raise ValueError(f"{role}.model={path!r} is not a local model folder: the transformers backend loads "
                         "offline; pass a folder (e.g. from `skillduet models smollm2 DIR`) or 'policy'")
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    if tokenizer.chat_template is None:
        raise ValueError(f"{role}.model={path!r}: the tokenizer has no chat template; use an instruct model")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=dtype).to(device)
    model.eval()
    return model, tokenizer


def _eos_ids(model: Any, tok: Any) -> list[int]:
    ids: list[int] = []
    gen_cfg = getattr(model, "generation_config", None)
    for value in (getattr(gen_cfg, "eos_token_id", None), tok.eos_token_id):
        for v in (value if isinstance(value, (list, tuple)) else [value]):
            if v is not None and int(v) not in ids:
                ids.append(int(v))
    if not ids:
        raise ValueError("the analyzer tokenizer has no eos_token_id: set one so generation can stop")
    return ids


def _device_of(model: Any):
    try:
        return next(model.parameters()).device
    except (StopIteration, AttributeError):
        return "cpu"


@contextlib.contextmanager
def _padding_left(tok: Any) -> Iterator[None]:
    """Decoder-only batches pad on the left so every row's new tokens start at the same column (a tokenizer
    without a pad token borrows EOS for the call); the tokenizer is given back unchanged."""
    previous_side, previous_pad = tok.padding_side, tok.pad_token
    tok.padding_side = "left"
    if previous_pad is None:
        tok.pad_token = tok.eos_token
    try:
        yield
    finally:
        tok.padding_side = previous_side
        if previous_pad is None:
            tok.pad_token = None


@contextlib.contextmanager
def _eval_mode(model: Any) -> Iterator[None]:
    """Generate without dropout; give a policy in training mode back as it was."""
    was_training = bool(getattr(model, "training", False))
    model.eval()
    try:
        yield
    finally:
        if was_training:
            model.train()
