"""Prompt templates (as data) for ALFWorld and WebShop, compatible with verl-agent's multi-turn prompts.

Every prompt asks the policy to reason inside ``<think> </think>`` and then give exactly one admissible action
inside ``<action> </action>`` (see ``envs.projection``). The task statement is always a line of its own,
``Your task is to: {task}``: the skill injector inserts skill sections right after that line, so no skill text
ever appears in these templates.

Step numbers are 1-based: the first decision of an episode is step 1 (= env ``info["step"] + 1``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

TASK_LINE = "Your task is to: {task}"
ALFWORLD_INTRO = "-= Welcome to TextWorld, ALFRED! =-"


@dataclass(frozen=True)
class PromptTemplates:
    """The text pieces of one environment's prompts; ``{...}`` fields are filled by the functions below."""

    role: str  # first line: who the agent is
    current: str  # the current observation at step {step}
    actions: str  # the admissible actions, pre-rendered
    history_header: str  # per-step template: what came before
    history_item: str  # one (observation, action) pair
    instruction: str  # how to answer


_INSTRUCTION = ("Now it's your turn to take an action. First reason step by step about the current situation "
                "inside <think> </think>, then give exactly one admissible action inside <action> </action>.")

TEMPLATES: dict[str, PromptTemplates] = {
    "alfworld": PromptTemplates(
        role="You are an expert agent operating in the ALFRED Embodied Environment.",
        current="You are now at step {step} and your current observation is: {observation}",
        actions="Your admissible actions of the current situation are: [{actions}].",
        history_header=("Prior to this step, you have already taken {taken} step(s). Below are the most recent "
                        "{shown} observations and the corresponding actions you took: {history}"),
        history_item="[Observation {n}: '{observation}', Action {n}: '{action}']",
        instruction=_INSTRUCTION,
    ),
    "webshop": PromptTemplates(
        role="You are an expert autonomous agent operating in the WebShop e-commerce platform.",
        current="You are now at step {step} and your current observation is: {observation}",
        actions="Your admissible actions of the current situation are: [{actions}].",
        history_header=("Prior to this step, you have already taken {taken} step(s). Below are the most recent "
                        "{shown} observations and the corresponding actions you took: {history}"),
        history_item="[Observation {n}: '{observation}', Action {n}: '{action}']",
        instruction=(_INSTRUCTION[:-1] + ", in the form search[<your query>] or click[<button>]."),
    ),
}


def _templates(env_name: str) -> PromptTemplates:
    if env_name not in TEMPLATES:
        raise KeyError(f"env_name={env_name!r} has no prompt templates: known are {', '.join(sorted(TEMPLATES))}")
    return TEMPLATES[env_name]


def format_observation(env_name: str, obs: str, task: str | None = None) -> str:
    """An observation as prompts show it: ALFWorld without its welcome banner and its task sentence (the task
    line carries it), WebShop after the instruction."""
    _templates(env_name)
    if env_name == "alfworld":
        text = obs.strip()
        if text.startswith(ALFWORLD_INTRO):
            text = text[len(ALFWORLD_INTRO):].strip()
        return text.partition(TASK_LINE.format(task=""))[0].strip()
    parts = [p.strip() for p in obs.split("[SEP]")]
    if task is not None and task.strip() in parts:
        parts = parts[parts.index(task.strip()) + 1:]
    elif "Instruction:" in parts:
        parts = parts[parts.index("Instruction:") + 2:]  # drop the label and the instruction text
    return " [SEP] ".join(p for p in parts if p)


def format_actions(env_name: str, admissible_actions: Sequence[str]) -> str:
    """The quoted action list of the prompt; ALFWorld's ``help`` is dropped, bare WebShop clickables become
    ``click[...]`` and a search bar ``search[<your query>]``."""
    _templates(env_name)
    if isinstance(admissible_actions, str):
        raise TypeError("admissible_actions must be a list of strings, not one str")
    actions = [a for a in admissible_actions if a != "help"]
    if env_name == "webshop":
        actions = [a if "[" in a else ("search[<your query>]" if a == "search" else f"click[{a}]") for a in actions]
    return ",\n ".join(f"'{a}'" for a in actions)


def _message(role: str, content: str) -> dict[str, str]:
    return {"role": role, "content": content}


def _check_task(task: str) -> None:
    if not isinstance(task, str) or not task.strip():
        raise ValueError("task must be the non-empty instruction text (info['task'] of the env)")
    if "\n" in task.strip():
        raise ValueError("task must be a single line: the skill injector keys on the 'Your task is to:' line")


def initial_messages(env_name: str, *, task: str, observation: str, admissible_actions: Sequence[str],
                     system_prompt: str | None = None) -> list[dict[str, str]]:
    """The first prompt of an episode: an optional system message and the first user turn (step 1)."""
    t = _templates(env_name)
    _check_task(task)
    user = "\n".join([
        t.role,
        TASK_LINE.format(task=task.strip()),
        t.current.format(step=1, observation=format_observation(env_name, observation, task)),
        t.actions.format(actions=format_actions(env_name, admissible_actions)),
        "",
        t.instruction,
    ])
    messages = [_message("system", system_prompt)] if system_prompt else []
    return messages + [_message("user", user)]


def turn_message(env_name: str, *, observation: str, admissible_actions: Sequence[str], step: int) -> str:
    """The user message of a later turn in the same conversation (the conversation carries the history)."""
    t = _templates(env_name)
    if step < 1:
        raise ValueError(f"step={step} must be >= 1 (1-based: env info['step'] + 1)")
    return "\n".join([
        t.current.format(step=step, observation=format_observation(env_name, observation)),
        t.actions.format(actions=format_actions(env_name, admissible_actions)),
        "",
        t.instruction,
    ])


def step_messages(env_name: str, *, task: str, history: Sequence[tuple[str, str]], observation: str,
                  admissible_actions: Sequence[str], step: int, history_length: int = 2,
                  system_prompt: str | None = None) -> list[dict[str, str]]:
    """verl-agent's per-step prompt: the task, the last ``history_length`` (observation, action) pairs of
    ``history`` (all earlier steps of the episode, oldest first), and the current observation."""
    t = _templates(env_name)
    _check_task(task)
    if history_length < 0:
        raise ValueError(f"history_length={history_length} must be >= 0")
    lines = [t.role, TASK_LINE.format(task=task.strip())]
    recent = list(history)[-history_length:] if history_length else []
    if recent:
        first = len(history) - len(recent) + 1
        items = " ".join(
            t.history_item.format(n=first + i, observation=format_observation(env_name, o, task), action=a)
            for i, (o, a) in enumerate(recent))
        lines.append(t.history_header.format(taken=len(history), shown=len(recent), history=items))
    lines += [
        t.current.format(step=step, observation=format_observation(env_name, observation, task)),
        t.actions.format(actions=format_actions(env_name, admissible_actions)),
        "",
        t.instruction,
    ]
    messages = [_message("system", system_prompt)] if system_prompt else []
    return messages + [_message("user", "\n".join(lines))]


__all__ = ["TASK_LINE", "TEMPLATES", "PromptTemplates", "format_actions", "format_observation",
           "initial_messages", "step_messages", "turn_message"]
