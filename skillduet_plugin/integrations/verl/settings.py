"""The ``skillduet:`` section of a verl config: the method's settings plus what only the verl adapter needs.

Method keys go to :class:`~skillduet_plugin.config.SkillDuetConfig` (validated there); the adapter keys are
``env`` (the environment the ``skillduet_agent`` loop plays), ``bank_path``, ``global_server`` and
``teacher_logprobs`` (where teacher and scoring log-probs are computed).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from skillduet_plugin.config import ConfigError, SkillDuetConfig

ADAPTER_KEYS = ("env", "bank_path", "global_server", "teacher_logprobs")

#: ``actor``: an FSDP forward on the actor workers (default). ``rollout``: prefill requests with
#: ``prompt_logprobs`` to the rollout servers, which serve the same weights after each sync (no FSDP pass; on a
#: GPU the replicas then stay awake until scoring is done). ``compare``: both, the rollout values are used and
#: the step logs their gap to the actor's (``skillduet/check/*``), a debugging mode that pays for both.
TEACHER_LOGPROB_SOURCES = ("actor", "rollout", "compare")


@dataclass
class EnvSettings:
    """What the ``skillduet_agent`` loop plays.

    ``factory`` (``"module:function"``) replaces ``envs.make(name)``; the three ``*_fn`` strings replace
    ``envs.prompts.initial_messages``/``turn_message`` and ``envs.projection.project_action`` (custom or test
    environments). ``max_turn_tokens`` caps one policy turn; the whole episode is capped by
    ``actor_rollout_ref.rollout.response_length``.
    """

    name: str = "alfworld"
    data_dir: str | None = None
    max_turns: int = 50
    max_turn_tokens: int = 512
    system_prompt: str | None = None
    invalid_action_penalty: float = 0.1
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    factory: str | None = None
    initial_messages_fn: str | None = None
    turn_message_fn: str | None = None
    project_action_fn: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"skillduet.env.name={self.name!r} is invalid: expected an environment name")
        for key in ("max_turns", "max_turn_tokens"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"skillduet.env.{key}={value!r} is invalid: expected an integer >= 1")
        if float(self.invalid_action_penalty) < 0:
            raise ConfigError(f"skillduet.env.invalid_action_penalty={self.invalid_action_penalty!r} is invalid: "
                              "must be >= 0 (it is subtracted per invalid step)")
        for key in ("factory", "initial_messages_fn", "turn_message_fn", "project_action_fn"):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, str) or ":" not in value):
                raise ConfigError(f"skillduet.env.{key}={value!r} is invalid: expected 'package.module:function'")


@dataclass
class VerlSettings:
    """The parsed ``skillduet:`` section."""

    method: SkillDuetConfig
    env: EnvSettings
    bank_path: str | None = None
    global_server: str = "skillduet_global_skills"
    teacher_logprobs: str = "actor"

    def __post_init__(self) -> None:
        if self.teacher_logprobs not in TEACHER_LOGPROB_SOURCES:
            raise ConfigError(f"skillduet.teacher_logprobs={self.teacher_logprobs!r} is invalid: allowed values are "
                              f"{', '.join(TEACHER_LOGPROB_SOURCES)}")

    def resolved_bank_path(self, default_local_dir: str) -> str:
        """``bank_path``, or ``<trainer.default_local_dir>/skillduet/bank.sqlite``."""
        if self.bank_path:
            return os.path.abspath(os.path.expanduser(self.bank_path))
        return os.path.abspath(os.path.join(os.path.expanduser(default_local_dir), "skillduet", "bank.sqlite"))


def _plain(section: Any) -> dict[str, Any]:
    if section is None:
        return {}
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(section, DictConfig):
            section = OmegaConf.to_container(section, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf comes with verl
        pass
    if not isinstance(section, Mapping):
        raise ConfigError(f"skillduet={section!r} is invalid: expected a mapping of SkillDuet settings")
    return dict(section)


def parse_settings(section: Any) -> VerlSettings:
    """Build :class:`VerlSettings` from the ``skillduet:`` section (DictConfig or mapping)."""
    data = _plain(section)
    env_data = data.pop("env", None) or {}
    if not isinstance(env_data, Mapping):
        raise ConfigError(f"skillduet.env={env_data!r} is invalid: expected a mapping")
    known = {f.name for f in fields(EnvSettings)}
    unknown = sorted(set(env_data) - known)
    if unknown:
        raise ConfigError(f"unknown skillduet.env setting(s) {', '.join(unknown)}: allowed keys are "
                          f"{', '.join(sorted(known))}")
    env = EnvSettings(**{k: (dict(v) if k == "env_kwargs" else v) for k, v in env_data.items()})
    bank_path = data.pop("bank_path", None)
    global_server = data.pop("global_server", None) or "skillduet_global_skills"
    teacher_logprobs = data.pop("teacher_logprobs", None) or "actor"
    return VerlSettings(method=SkillDuetConfig.from_dict(data), env=env, bank_path=bank_path,
                        global_server=str(global_server), teacher_logprobs=teacher_logprobs)


def settings_from_trainer_config(config: Any) -> VerlSettings:
    """The SkillDuet settings of a whole verl config; a missing section means the paper defaults."""
    section = config.get("skillduet", None) if hasattr(config, "get") else None
    return parse_settings(section)


__all__ = ["ADAPTER_KEYS", "TEACHER_LOGPROB_SOURCES", "EnvSettings", "VerlSettings", "parse_settings",
           "settings_from_trainer_config"]
