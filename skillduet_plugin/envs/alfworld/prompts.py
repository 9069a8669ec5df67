"""ALFWorld's prompt pieces (registered with the env): the role line, and observations without the welcome
banner and the task sentence (the task line carries it)."""

from __future__ import annotations

from skillduet_plugin.envs.prompts import TASK_LINE, PromptTemplates

ALFWORLD_INTRO = "-= Welcome to TextWorld, ALFRED! =-"

TEMPLATES = PromptTemplates(role="You are an expert agent operating in the ALFRED Embodied Environment.")


def format_observation(obs: str, task: str | None = None) -> str:
    text = obs.strip()
    if text.startswith(ALFWORLD_INTRO):
        text = text[len(ALFWORLD_INTRO):].strip()
    return text.partition(TASK_LINE.format(task=""))[0].strip()
