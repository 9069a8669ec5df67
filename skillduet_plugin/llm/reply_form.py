"""The fixed form of a Local skill reply, and how a backend asks for it (``BackendConfig.reply_form``).

A Local skill is ``<skill>``, then 2 to 6 lines ``- <line>``, then ``</skill>``; a line starts with a capital
letter, has 8 to 120 characters and holds no newline, tag, ``#`` or ``:`` (so a heading, ``Step 2:`` or an
``Action:`` / ``Observation:`` line of the prompt cannot be written in it). With ``reply_form``:

- ``free``: no constraint (the prompt shows the form; the judge, ``skills.judge``, decides what is advice);
- ``regex``: :data:`SKILL_REGEX` enforced while decoding: an OpenAI-compatible server gets vLLM's
  ``structured_outputs: {"regex": ...}``; the transformers backend masks logits with xgrammar's
  (:class:`GrammarCache`);
- ``json_schema``: an OpenAI-style ``response_format`` with :data:`SKILL_JSON_SCHEMA` (servers without regex
  support); the JSON reply is turned back into the ``<skill>`` form (:func:`skill_from_json`).

A server that refuses the constraint (HTTP 4xx) gets the request again without it, and no constraint after that
(counted in ``form_refusals``): the step never loses its replies to it.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

#: ``ChatRequest.form`` of an analyzer request whose reply is a Local skill
SKILL_FORM = "skill"
REPLY_FORMS = ("free", "regex", "json_schema")
SKILL_REGEX = r"<skill>\n(- [A-Z][^\n<>#:]{7,119}\n){2,6}</skill>"
SKILL_JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"skill": {"type": "array", "minItems": 2, "maxItems": 6,
                             "items": {"type": "string", "minLength": 8, "maxLength": 120,
                                       "pattern": "^[A-Z][^\\n<>#:]*$"}}},
    "required": ["skill"], "additionalProperties": False}


def request_fields(reply_form: str) -> dict[str, Any]:
    """The fields an OpenAI-compatible chat request carries to constrain a Local skill reply."""
    if reply_form == "regex":
        return {"structured_outputs": {"regex": SKILL_REGEX}}
    if reply_form == "json_schema":
        return {"response_format": {"type": "json_schema",
                                    "json_schema": {"name": "skill", "schema": SKILL_JSON_SCHEMA, "strict": True}}}
    return {}


def skill_from_json(text: str) -> str:
    """A ``{"skill": [lines]}`` reply as the ``<skill>`` form; any other text unchanged (the judge sees it as
    it came, e.g. a JSON object cut at the token budget)."""
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, TypeError, ValueError):
        return text
    lines = data.get("skill") if isinstance(data, dict) else None
    if not isinstance(lines, list) or not all(isinstance(x, str) for x in lines):
        return text
    return "<skill>\n" + "".join(f"- {' '.join(x.split())}\n" for x in lines) + "</skill>"


class GrammarCache:
    """The compiled :data:`SKILL_REGEX` for one tokenizer (compiled once: about half a second)."""

    def __init__(self, tokenizer: Any, vocab_size: int, stop_ids: Sequence[int]) -> None:
        import xgrammar as xgr  # lazy: xgrammar

        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=int(vocab_size),
                                                  stop_token_ids=list(stop_ids))
        self.compiled = xgr.GrammarCompiler(info).compile_regex(SKILL_REGEX)

    def processor(self) -> Any:
        """A fresh logits processor for one ``generate`` call (xgrammar's keep per-call state)."""
        from xgrammar.contrib.hf import LogitsProcessor  # lazy: xgrammar, transformers

        return LogitsProcessor(self.compiled)


__all__ = ["GrammarCache", "REPLY_FORMS", "SKILL_FORM", "SKILL_JSON_SCHEMA", "SKILL_REGEX", "request_fields",
           "skill_from_json"]
