"""The text pieces of an environment's prompts (:class:`PromptTemplates`), below the registry that holds them per
environment and the prompt builder that fills them (``envs.prompts``)."""

from __future__ import annotations

from dataclasses import dataclass

#: The first line of an environment registered with its factory alone (no ``prompts=``): who the agent is, in
#: verl-agent's wording, naming no environment.
NEUTRAL_ROLE = "You are an expert agent operating in a text-based environment."

INSTRUCTION = ("Now it's your turn to take an action. First reason step by step about the current situation "
               "inside <think> </think>, then give exactly one admissible action inside <action> </action>.")


@dataclass(frozen=True)
class PromptTemplates:
    """The text pieces of one environment's prompts; ``{...}`` fields are filled by ``envs.prompts``.
    An environment sets ``role`` and usually ``instruction``; the rest is verl-agent's wording."""

    role: str  # first line: who the agent is
    instruction: str = INSTRUCTION  # how to answer
    current: str = "You are now at step {step} and your current observation is: {observation}"
    actions: str = "Your admissible actions of the current situation are: [{actions}]."
    history_header: str = ("Prior to this step, you have already taken {taken} step(s). Below are the most recent "
                           "{shown} observations and the corresponding actions you took: {history}")
    history_item: str = "[Observation {n}: '{observation}', Action {n}: '{action}']"

    def texts(self) -> tuple[str, ...]:
        """Every fixed text piece (the tiny tokenizer learns them as words)."""
        return (self.role, self.current, self.actions, self.history_header, self.history_item, self.instruction)


#: The standard prompt of an environment registered without ``prompts=`` (a neutral role, verl-agent's wording)
DEFAULT_TEMPLATES = PromptTemplates(role=NEUTRAL_ROLE)


__all__ = ["DEFAULT_TEMPLATES", "INSTRUCTION", "NEUTRAL_ROLE", "PromptTemplates"]
