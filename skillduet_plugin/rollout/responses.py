"""The response the policy is taught to give for an action: ``<think>reason</think><action>A</action>``.

The warm start clones these responses, choose mode (``rollout.choice``) scores them, and the episode engine
records them as the chosen turn; they live apart from both so that the engine needs no scoring code (and no
torch) to play a choose-mode episode.
"""

from __future__ import annotations

import re

# A short reason per action verb (the think block the warm start clones and choose mode scores).
_THINKS = (("go to", "I should look there."), ("take", "I need this object."), ("move", "I put it in place."),
           ("put", "I put it in place."), ("open", "I look inside."), ("close", "I close it."),
           ("heat", "It must be hot."), ("cool", "It must be cool."), ("clean", "It must be clean."),
           ("use", "I need the light."), ("examine", "I look closely."), ("search", "I search for it."),
           ("click", "This matches the goal."))


_CLICK = re.compile(r"click\[(.+)\]", re.IGNORECASE)


def action_response(action: str) -> str:
    """The assistant turn for one action: ``<think>reason</think><action>action</action>`` (no eos).

    A ``click[X]`` names what it clicks in its reason (``I choose X.``): after a space, as the instruction
    writes it, ``purple`` is the instruction's own token, which ``[purple`` is not, so a small model can match
    an option to the instruction's words."""
    click = _CLICK.fullmatch(action.strip())
    if click is not None:
        return f"<think>I choose {click.group(1)}.</think><action>{action}</action>"
    reason = next((r for verb, r in _THINKS if action.lower().startswith(verb)), "This is the next step.")
    return f"<think>{reason}</think><action>{action}</action>"


__all__ = ["action_response"]
