"""The episode settings, declared once: how many turns and tokens an episode may use, what an invalid action
costs, how the policy acts and when the OPD teacher log-probs are computed.

The run config (``runs.config.RunConfig``), the TRL config (``SkillDuetGRPOConfig``) and the verl settings
(``skillduet.env.*``) take these fields from :class:`EpisodeSettings` with :func:`episode_field`, so each idea has
one name, one help text, one constraint and one default. Where a config deliberately starts from another value
(the CPU demo plays 8 turns of 32 tokens), it says so at the field: ``episode_field("max_turns", 8)``.

Two teacher settings are different ideas and keep two names: ``teacher_at`` (*when*: once per rollout batch or
in every loss call; TRL) and verl's ``skillduet.teacher_logprobs`` (*which engine*: the actor's forward or the
rollout servers' prefills; verl always computes them once per rollout batch).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterable

from skillduet_plugin.core.names import ACTION_SELECTIONS, TEACHER_AT
from skillduet_plugin.core.settings import setting, validate_fields


@dataclass
class EpisodeSettings:
    """How one episode is played; each field's help text is its documentation (the defaults are the method's,
    the verl-agent ALFWorld budget of 50 turns of 512 tokens)."""

    max_turns: int = setting(50, "policy turns per episode at most", kind="int", lo=1)
    max_new_tokens_per_turn: int = setting(512, "generated tokens per policy turn at most", kind="int", lo=1)
    max_total_tokens: int | None = setting(None, "prompt + completion tokens per episode at most (null: the "
                                           "model's max_position_embeddings)", kind="int", lo=2, optional=True,
                                           fix="expected an integer >= 2 or null")
    invalid_action_penalty: float = setting(0.1, "subtracted from an episode's reward per turn whose response did "
                                            "not parse to an admissible action", lo=0)
    action_selection: str = setting(
        "generate", "generate samples each turn freely; choose draws among the admissible actions by the policy's "
                    "scores (rollout.choice), trained on its decisive tokens",
        choices=ACTION_SELECTIONS)
    teacher_at: str = setting("generation", "when OPD teacher log-probs are computed: once per rollout batch "
                              "(generation, cheapest) or with the live model in every loss call (loss, fresh when "
                              "a batch is reused for several updates)", choices=TEACHER_AT)

    def __post_init__(self) -> None:
        validate_fields(self)


_FIELDS = {f.name: f for f in dataclasses.fields(EpisodeSettings)}


def episode_field(name: str, default: Any = dataclasses.MISSING, *, help: str = "",  # noqa: A002 - dataclass name
                  with_check: bool = True, **check_changes: Any) -> Any:
    """The dataclass field ``name`` of :class:`EpisodeSettings` for another settings class: the same help text and
    constraint; ``default`` (when given) and ``help`` (appended) say where that class deliberately differs, and
    ``check_changes`` widen the constraint (e.g. ``choices`` with ``auto``). ``with_check=False`` leaves the
    constraint out of the metadata, for classes whose metadata a parser reads (TRL's ``HfArgumentParser`` turns
    metadata into argparse keywords); such a class checks with :func:`episode_checks`."""
    base = _FIELDS[name]
    value = base.default if default is dataclasses.MISSING else default
    text = base.metadata["help"] + (f"; {help}" if help else "")
    if not with_check:
        return dataclasses.field(default=value, metadata={"help": text})
    return setting(value, text, **{**base.metadata["check"], **check_changes})


def episode_checks(names: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
    """``field name -> check keywords`` of the episode settings (all of them, or ``names``), for
    ``core.settings.validate_fields(obj, checks=...)``."""
    return {n: dict(_FIELDS[n].metadata["check"]) for n in (names if names is not None else _FIELDS)}


def episode_settings(source: Any, **changes: Any) -> EpisodeSettings:
    """The :class:`EpisodeSettings` of any config that carries them (attributes of the same names; one a config
    lacks keeps the method default), with ``changes`` applied."""
    values = {n: getattr(source, n) for n in _FIELDS if hasattr(source, n)}
    values.update(changes)
    return EpisodeSettings(**values)


__all__ = ["EpisodeSettings", "episode_checks", "episode_field", "episode_settings"]
