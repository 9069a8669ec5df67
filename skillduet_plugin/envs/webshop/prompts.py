"""WebShop's prompt pieces (registered with the env): the role and answer format, observations after the
instruction, and bare clickables shown as ``click[...]`` (the search bar as ``search[<your query>]``)."""

from __future__ import annotations

from typing import Sequence

from skillduet_plugin.envs.prompts import INSTRUCTION, PromptTemplates

TEMPLATES = PromptTemplates(
    role="You are an expert autonomous agent operating in the WebShop e-commerce platform.",
    instruction=INSTRUCTION[:-1] + ", in the form search[<your query>] or click[<button>].",
)


def format_observation(obs: str, task: str | None = None) -> str:
    parts = [p.strip() for p in obs.split("[SEP]")]
    if task is not None and task.strip() in parts:
        parts = parts[parts.index(task.strip()) + 1:]
    elif "Instruction:" in parts:
        parts = parts[parts.index("Instruction:") + 2:]  # drop the label and the instruction text
    return " [SEP] ".join(p for p in parts if p)


def format_actions(actions: Sequence[str]) -> list[str]:
    return [a if "[" in a else ("search[<your query>]" if a == "search" else f"click[{a}]") for a in actions]
