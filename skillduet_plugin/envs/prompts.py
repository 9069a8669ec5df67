"""The prompt builder of every environment, compatible with verl-agent's multi-turn prompts; each environment
registers its pieces (``PromptTemplates``, observation and action formatting) with ``register_env``.

Every prompt asks the policy to reason inside ``<think> </think>`` and then give exactly one admissible action
inside ``<action> </action>`` (see ``envs.projection``). The task statement is always a line of its own,
``Your task is to: {task}``: the skill injector inserts skill sections right after that line, so no skill text
ever appears in these templates.

Step numbers are 1-based: the first decision of an episode is step 1 (= env ``info["step"] + 1``).
"""

from __future__ import annotations

from typing import Sequence

from skillduet_plugin.envs.registry import env_spec
from skillduet_plugin.envs.templates import DEFAULT_TEMPLATES, INSTRUCTION, NEUTRAL_ROLE, PromptTemplates

TASK_LINE = "Your task is to: {task}"


def templates(env_name: str) -> PromptTemplates:
    """The prompt pieces of ``env_name``: its registered ``prompts=``, or :data:`DEFAULT_TEMPLATES` when it
    registered none. An environment that builds its own first prompt (``initial_messages=``) has no standard
    pieces to fall back on: asking for them is a one-line error."""
    spec = env_spec(env_name)
    if spec.prompts.templates is not None:
        return spec.prompts.templates
    if spec.prompts.initial_messages is not None:
        raise KeyError(f"env_name={env_name!r} has no prompt templates: it registers its own initial_messages")
    return DEFAULT_TEMPLATES


def format_observation(env_name: str, obs: str, task: str | None = None) -> str:
    """An observation as prompts show it (each environment registers how: ALFWorld drops its welcome banner
    and task sentence, WebShop keeps what follows the instruction)."""
    spec = env_spec(env_name)
    return spec.prompts.format_observation(obs, task) if spec.prompts.format_observation is not None else obs.strip()


def format_actions(env_name: str, admissible_actions: Sequence[str]) -> str:
    """The quoted action list of the prompt (``help`` dropped; the environment may rewrite the rest)."""
    spec = env_spec(env_name)
    if isinstance(admissible_actions, str):
        raise TypeError("admissible_actions must be a list of strings, not one str")
    actions = [a for a in admissible_actions if a != "help"]
    if spec.prompts.format_actions is not None:
        actions = list(spec.prompts.format_actions(actions))
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
    spec = env_spec(env_name)
    if spec.prompts.initial_messages is not None:
        return spec.prompts.initial_messages(env_name, task=task, observation=observation,
                                             admissible_actions=admissible_actions, system_prompt=system_prompt)
    t = templates(env_name)
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
    spec = env_spec(env_name)
    if spec.prompts.turn_message is not None:
        return spec.prompts.turn_message(env_name, observation=observation, admissible_actions=admissible_actions,
                                         step=step)
    t = templates(env_name)
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
    t = templates(env_name)
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


__all__ = ["DEFAULT_TEMPLATES", "INSTRUCTION", "NEUTRAL_ROLE", "TASK_LINE", "PromptTemplates", "format_actions",
           "format_observation", "initial_messages", "step_messages", "templates", "turn_message"]
