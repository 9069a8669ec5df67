"""Message-level insertion of skills into chat prompts: the Global into rollout prompts, the Local into teacher
prompts.

Skills are inserted into the message list before the chat template is applied (never by editing a templated
string), and only the skill text is budgeted: the task text and observations are never cut. With the default
``after_task`` position a section goes right after the line of the first user turn that holds the task text;
the section ends with a blank line and starts right after a newline, so the student prompt's tokens are the
teacher prompt's tokens minus one contiguous span (the inserted section) under byte-level BPE tokenizers.
"""

from __future__ import annotations

import copy
from typing import Any, Sequence

from skillduet_plugin.skills.budget import truncate_lines
from skillduet_plugin.skills.sanitize import strip_control_tokens

GLOBAL_HEADER = "## Skills"
LOCAL_HEADER = "## Hindsight skill"
POSITIONS = ("after_task", "system", "user_start")


def skill_section(header: str, text: str, budget_tokens: int, tokenizer: Any = None,
                  special_tokens: Sequence[str] = ()) -> str:
    """``header`` + the skill text cut to ``budget_tokens`` (whole lines), or "" for empty text.

    The text is stripped of control tokens again here: whatever the bank holds, nothing that could close a
    chat turn reaches a prompt.
    """
    clean = strip_control_tokens(text or "", special_tokens)
    if not clean:
        return ""
    clean, _ = truncate_lines(clean, budget_tokens, tokenizer)
    if not clean.strip():
        return ""
    return f"{header}\n{clean.strip()}"


def _first_user(messages: list[dict[str, str]]) -> int:
    for i, m in enumerate(messages):
        if m.get("role") == "user":
            return i
    raise ValueError("prompt_messages has no user message: skills are inserted into the first user turn; "
                     "pass the rollout prompt as chat messages with at least one {'role': 'user'} entry")


def insert_sections(prompt_messages: Sequence[dict[str, str]], sections: Sequence[str], *, task: str,
                    position: str = "after_task") -> list[dict[str, str]]:
    """A copy of ``prompt_messages`` with the non-empty ``sections`` inserted together, in order.

    Positions: ``after_task`` (after the first-user-turn line containing ``task``; the start of the first user
    turn when the task text is absent), ``user_start`` (start of the first user turn), ``system`` (appended to
    the system message, which is created when missing).
    """
    if position not in POSITIONS:
        raise ValueError(f"skill_position={position!r} is invalid: allowed values are {', '.join(POSITIONS)}")
    messages = [dict(m) for m in copy.deepcopy(list(prompt_messages))]
    sections = [s for s in sections if s]
    if not sections:
        return messages
    block = "\n\n".join(sections)
    if position == "system":
        if messages and messages[0].get("role") == "system":
            content = messages[0].get("content", "")
            messages[0]["content"] = f"{content}\n\n{block}" if content else block
        else:
            messages.insert(0, {"role": "system", "content": block})
        return messages
    idx = _first_user(messages)
    content = messages[idx].get("content", "")
    if not isinstance(content, str):
        raise ValueError("the first user message's content must be a string (multimodal content parts are "
                         "not supported for skill insertion)")
    anchor = content.find(task) if (position == "after_task" and task and task.strip()) else -1
    if anchor < 0:
        messages[idx]["content"] = f"{block}\n\n{content}" if content else block
        return messages
    line_end = content.find("\n", anchor + len(task))
    if line_end < 0:  # the task line is the last line
        messages[idx]["content"] = f"{content}\n{block}"
    else:
        messages[idx]["content"] = f"{content[:line_end + 1]}{block}\n\n{content[line_end + 1:]}"
    return messages


def global_messages(prompt_messages: Sequence[dict[str, str]], global_text: str, *, task: str, budget_tokens: int,
                    position: str = "after_task", tokenizer: Any = None,
                    special_tokens: Sequence[str] = ()) -> list[dict[str, str]]:
    """The rollout (student) prompt: ``prompt_messages`` with the Global section (``GLOBAL_HEADER`` + the text cut
    to ``budget_tokens``) inserted at ``position``; unchanged for empty text.

    The one place a Global-augmented prompt is built: the lifecycle (TRL rollouts, scoring contexts), the verl
    agent loop, the warm start's skill sections and the evaluation's neutral condition all call it, so a
    teacher prompt is always a student prompt plus the Local skill.
    """
    section = skill_section(GLOBAL_HEADER, global_text, budget_tokens, tokenizer, special_tokens)
    return insert_sections(prompt_messages, [section], task=task, position=position)
