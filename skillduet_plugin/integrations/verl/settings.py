"""The ``skillduet:`` section of a verl config: the method's settings plus what only the verl adapter needs.

Method keys go to :class:`~skillduet_plugin.config.SkillDuetConfig` (validated there); the adapter keys are
``env`` (the environment the ``skillduet_agent`` loop plays), ``bank_path``, ``global_server``,
``teacher_logprobs`` (where teacher and scoring log-probs are computed) and ``replay_poll_interval_s``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping

from skillduet_plugin.config import SkillDuetConfig
from skillduet_plugin.core.episode import episode_field
from skillduet_plugin.core.settings import ConfigError, check, check_keys, invalid, setting, validate_fields

#: ``actor``: an FSDP forward on the actor workers (default). ``rollout``: prefill requests with
#: ``prompt_logprobs`` to the rollout servers, which serve the same weights after each sync (no FSDP pass; on a
#: GPU the replicas then stay awake until scoring is done). ``compare``: both, the rollout values are used and
#: the step logs their gap to the actor's (``skillduet/check/*``), a debugging mode that pays for both.
TEACHER_LOGPROB_SOURCES = ("actor", "rollout", "compare")

_TARGET = {"kind": "str", "optional": True, "fix": "expected 'package.module:function'"}


@dataclass
class EnvSettings:
    """What the ``skillduet_agent`` loop plays (``skillduet.env.*``); the episode as a whole is capped by
    ``actor_rollout_ref.rollout.response_length``."""

    name: str = setting("alfworld", "the registered environment played", kind="str",
                        fix="expected an environment name")
    data_dir: str | None = setting(None, "the environment's data folder (null: its default data)", kind="path",
                                   optional=True)
    max_turns: int = episode_field("max_turns")
    max_new_tokens_per_turn: int = episode_field("max_new_tokens_per_turn")
    system_prompt: str | None = setting(None, "an optional system message", kind="str", optional=True)
    invalid_action_penalty: float = episode_field("invalid_action_penalty")
    env_kwargs: dict[str, Any] = setting(help="extra keywords of the environment factory", default_factory=dict,
                                         kind="mapping")
    factory: str | None = setting(None, "'module:function' replacing envs.make(name) (unregistered environments)",
                                  **_TARGET)
    initial_messages_fn: str | None = setting(None, "'module:function' replacing envs.prompts.initial_messages",
                                              **_TARGET)
    turn_message_fn: str | None = setting(None, "'module:function' replacing envs.prompts.turn_message",
                                          **_TARGET)
    project_action_fn: str | None = setting(None, "'module:function' replacing envs.projection.project_action",
                                            **_TARGET)

    def __post_init__(self) -> None:
        validate_fields(self, "skillduet.env.")
        for key in ("factory", "initial_messages_fn", "turn_message_fn", "project_action_fn"):
            value = getattr(self, key)
            if value is not None and ":" not in value:
                invalid(f"skillduet.env.{key}", value, "expected 'package.module:function'")


@dataclass
class VerlSettings:
    """The parsed ``skillduet:`` section."""

    method: SkillDuetConfig
    env: EnvSettings
    bank_path: str | None = None
    global_server: str = "skillduet_global_skills"
    teacher_logprobs: str = "actor"
    replay_poll_interval_s: float | None = None

    def __post_init__(self) -> None:
        check("skillduet.teacher_logprobs", self.teacher_logprobs, choices=TEACHER_LOGPROB_SOURCES)
        if self.replay_poll_interval_s is not None:
            check("skillduet.replay_poll_interval_s", self.replay_poll_interval_s, kind="number", lo=0,
                  lo_open=True, fix="expected seconds > 0 (e.g. 0.1), or null for verl's own 2.0")

    def resolved_bank_path(self, default_local_dir: str) -> str:
        """``bank_path``, or ``<trainer.default_local_dir>/skillduet/bank.sqlite``."""
        if self.bank_path:
            return os.path.abspath(os.path.expanduser(self.bank_path))
        return os.path.abspath(os.path.join(os.path.expanduser(default_local_dir), "skillduet", "bank.sqlite"))


def _plain(section: Any) -> dict[str, Any]:
    if section is None:
        return {}
    try:
        from omegaconf import DictConfig, OmegaConf  # lazy: omegaconf

        if isinstance(section, DictConfig):
            section = OmegaConf.to_container(section, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf comes with verl
        pass
    if not isinstance(section, Mapping):
        invalid("skillduet", section, "expected a mapping of SkillDuet settings")
    return dict(section)


def parse_settings(section: Any) -> VerlSettings:
    """Build :class:`VerlSettings` from the ``skillduet:`` section (DictConfig or mapping)."""
    data = _plain(section)
    env_data = data.pop("env", None) or {}
    if not isinstance(env_data, Mapping):
        invalid("skillduet.env", env_data, "expected a mapping")
    if "max_turn_tokens" in env_data:  # the name before the episode settings were declared once (core.episode)
        raise ConfigError(f"skillduet.env.max_turn_tokens={env_data['max_turn_tokens']!r} was renamed: write "
                          f"skillduet.env.max_new_tokens_per_turn (the same name as in the run and TRL configs)")
    check_keys("skillduet.env", env_data, EnvSettings)
    env = EnvSettings(**{k: (dict(v) if k == "env_kwargs" else v) for k, v in env_data.items()})
    bank_path = data.pop("bank_path", None)
    global_server = data.pop("global_server", None) or "skillduet_global_skills"
    teacher_logprobs = data.pop("teacher_logprobs", None) or "actor"
    replay_poll_interval_s = data.pop("replay_poll_interval_s", None)
    try:
        method = SkillDuetConfig.from_dict(data)
    except ConfigError as err:
        raise err.under("skillduet") from None
    # What the verl adapter does not implement is refused, not silently ignored.
    if method.opd_agg != "token-mean":
        invalid("skillduet.opd_agg", method.opd_agg, "on verl the OPD term is aggregated like the PPO loss: set "
                "actor_rollout_ref.actor.loss_agg_mode instead")
    return VerlSettings(method=method, env=env, bank_path=bank_path, global_server=str(global_server),
                        teacher_logprobs=teacher_logprobs, replay_poll_interval_s=replay_poll_interval_s)


def settings_from_trainer_config(config: Any) -> VerlSettings:
    """The SkillDuet settings of a whole verl config; a missing section means the paper defaults."""
    section = config.get("skillduet", None) if hasattr(config, "get") else None
    return parse_settings(section)


__all__ = ["TEACHER_LOGPROB_SOURCES", "EnvSettings", "VerlSettings", "parse_settings", "settings_from_trainer_config"]
