"""WebShop's prompt pieces (registered with the env): the role and answer format, observations from the
instruction on, and bare clickables shown as ``click[...]`` (the search bar as ``search[<your query>]``)."""

from __future__ import annotations

from typing import Sequence

from skillduet_plugin.envs.prompts import INSTRUCTION, PromptTemplates

TEMPLATES = PromptTemplates(
    role="You are an expert autonomous agent operating in the WebShop e-commerce platform.",
    instruction=INSTRUCTION[:-1] + ", in the form search[<your query>] or click[<button>].",
)


def format_observation(obs: str, task: str | None = None) -> str:
    """A page as the prompt shows it: from the instruction on (the ``WebShop`` logo and the ``Instruction:``
    label dropped). Every page keeps its instruction, as the benchmark's pages do: the options a page offers
    then sit a few tokens from the instruction that names the right one, a match a small model learns (measured
    in docs/study.md) where one ~1,000 tokens back, in the first prompt, it did not."""
    parts = [p.strip() for p in obs.split("[SEP]")]
    if "Instruction:" in parts:
        parts = parts[parts.index("Instruction:") + 1:]
    return " [SEP] ".join(p for p in parts if p)


def format_actions(actions: Sequence[str]) -> list[str]:
    return [a if "[" in a else ("search[<your query>]" if a == "search" else f"click[{a}]") for a in actions]
