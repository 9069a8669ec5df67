"""Token-level view of a multi-turn episode: prompt ids, then policy and environment segments with a mask.

A whole episode is one training sequence: the first prompt (chat-templated, ending in the assistant header),
then the policy's generated tokens (mask 1) and, between turns, the environment's turn tokens (the templated
user message with the next observation and the next assistant header, mask 0). Generated tokens are kept
verbatim (never re-tokenised), so what is trained on is exactly what was sampled. It sits in ``core`` because
rollouts, skill scoring and the warm start all lay tokens out this way (it needs no torch and no framework).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

_PROBE_ASSISTANT = "PROBE-ASSISTANT-TEXT"
_PROBE_USER = "PROBE-USER-TEXT"


class ChatTokenizer:
    """Chat-template-aware tokenisation of prompts and of environment turns between assistant turns."""

    def __init__(self, tokenizer: Any, chat_template_kwargs: dict[str, Any] | None = None) -> None:
        self.tokenizer = tokenizer
        self.template_kwargs = dict(chat_template_kwargs or {})
        eos = tokenizer.eos_token_id
        if eos is None:
            raise ValueError("the tokenizer has no eos_token_id: the end of an assistant turn cannot be detected")
        self.eos_token_id: int = int(eos)
        self.pad_token_id: int = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos)
        self._turn_prefix, self._turn_suffix = self._probe_turn_template()

    def render(self, messages: Sequence[dict[str, str]], add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            list(messages), tokenize=False, add_generation_prompt=add_generation_prompt, **self.template_kwargs)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prompt_ids(self, messages: Sequence[dict[str, str]]) -> list[int]:
        """Token ids of the chat-templated ``messages`` followed by the assistant generation header."""
        return self.encode(self.render(messages, add_generation_prompt=True))

    def _probe_turn_template(self) -> tuple[str, str]:
        """Find the text the template puts around a user turn that follows a finished assistant turn.

        Renders ``[user, assistant, user, assistant, user]`` with the generation prompt and reads what follows
        the *second* assistant turn. Probing a middle turn (not the last one) matters for templates such as
        Qwen3's, which render the final assistant turn differently (an empty think block) from earlier ones.
        """
        marker_a, marker_u = _PROBE_ASSISTANT + "2", _PROBE_USER + "3"
        probe = [{"role": "user", "content": _PROBE_USER}, {"role": "assistant", "content": _PROBE_ASSISTANT},
                 {"role": "user", "content": _PROBE_USER + "2"}, {"role": "assistant", "content": marker_a},
                 {"role": "user", "content": marker_u}]
        text = self.render(probe, add_generation_prompt=True)
        idx = text.rfind(marker_a)
        if idx < 0 or marker_u not in text[idx:]:
            raise ValueError("cannot locate the turns in the chat template's output: multi-turn episodes need "
                             "a template that renders every user and assistant message")
        rest = text[idx + len(marker_a):]
        # The eos token ends the assistant turn; the policy generates it, the env turn starts after it.
        eos_text = self.tokenizer.convert_ids_to_tokens(self.eos_token_id)
        if rest.startswith(eos_text):
            rest = rest[len(eos_text):]
        prefix, suffix = rest.split(marker_u, 1)
        return prefix, suffix

    def turn_ids(self, user_content: str) -> list[int]:
        """Environment tokens between the end of an assistant turn (after eos) and the next generation."""
        return self.encode(self._turn_prefix + user_content + self._turn_suffix)


@dataclass
class EpisodeTokens:
    """A growing token sequence of one episode: ``prompt_ids`` then completion segments with a mask."""

    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    completion_mask: list[int] = field(default_factory=list)
    # old log-probs of policy tokens if the generator returned them (0.0 placeholders on env tokens)
    completion_logps: list[float] = field(default_factory=list)

    def add_policy(self, ids: Sequence[int], logps: Sequence[float] | None = None,
                   mask: Sequence[int] | None = None) -> None:
        """Append policy tokens; ``mask`` (default all 1) marks which of them the losses train on."""
        if mask is not None and len(mask) != len(ids):
            raise ValueError(f"mask has {len(mask)} entries for {len(ids)} policy tokens")
        self.completion_ids.extend(int(i) for i in ids)
        self.completion_mask.extend([int(bool(m)) for m in mask] if mask is not None else [1] * len(ids))
        self.completion_logps.extend(list(logps) if logps is not None else [0.0] * len(ids))

    def add_env(self, ids: Sequence[int]) -> None:
        self.completion_ids.extend(int(i) for i in ids)
        self.completion_mask.extend([0] * len(ids))
        self.completion_logps.extend([0.0] * len(ids))

    @property
    def context_ids(self) -> list[int]:
        """Everything so far: what the policy conditions on for its next turn."""
        return self.prompt_ids + self.completion_ids

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.completion_ids)
