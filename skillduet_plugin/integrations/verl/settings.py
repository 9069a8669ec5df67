"""The ``skillduet:`` section of a verl config, and the ``trainer.plugins=[skillduet]`` switch.

The section is the method's settings (:class:`~skillduet_plugin.config.SkillDuetConfig` keys, directly under
``skillduet.``), the environment (``skillduet.env.*``, :class:`EnvSettings`) and the adapter's own keys
(:class:`VerlSettings`). Every key, default and help text is declared once, in these dataclasses: the section a
run starts from is generated from them (:func:`default_section`; ``skillduet_plugin.main_ppo`` composes it into
its Hydra config), and stock verl takes the same keys as ``+skillduet.<key>=...``.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from skillduet_plugin.config import SkillDuetConfig, check_estimator
from skillduet_plugin.core.episode import episode_field
from skillduet_plugin.core.settings import (ConfigError, check, check_keys, invalid, setting, take_renamed,
                                            validate_fields)
from skillduet_plugin.envs.registry import env_names
from skillduet_plugin.integrations.verl import AGENT_LOOP_NAME, PLUGIN_NAME, TRAINER_NAME

#: ``actor``: an FSDP forward on the actor workers (default). ``rollout``: prefill requests with
#: ``prompt_logprobs`` to the rollout servers, which serve the same weights after each sync (no FSDP pass; on a
#: GPU the replicas then stay awake until scoring is done). ``compare``: both, the rollout values are used and
#: the step logs their gap to the actor's (``skillduet/check/*``), a debugging mode that pays for both.
TEACHER_LOGPROB_SOURCES = ("actor", "rollout", "compare")

#: Old dotted names (inside ``skillduet:``) -> their names now; accepted with a warning until ``REMOVED_IN``.
RENAMED: dict[str, str] = {"env.max_turn_tokens": "env.max_new_tokens_per_turn"}

STOCK_TRAINER_MODE = "sync"
STOCK_AGENT_LOOP = "single_turn_agent"

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
        if self.factory is None:  # else the factory builds it: the name need not be registered
            check("skillduet.env.name", self.name, choices=env_names())
        for key in ("factory", "initial_messages_fn", "turn_message_fn", "project_action_fn"):
            value = getattr(self, key)
            if value is not None and ":" not in value:
                invalid(f"skillduet.env.{key}", value, "expected 'package.module:function'")


@dataclass
class VerlSettings:
    """The parsed ``skillduet:`` section: the method, the environment and the verl adapter's own keys."""

    method: SkillDuetConfig = field(default_factory=SkillDuetConfig,
                                    metadata={"help": "the method's settings, directly under skillduet."})
    env: EnvSettings = field(default_factory=EnvSettings, metadata={"help": "what the agent loop plays"})
    bank_path: str | None = setting(None, "the skill bank's SQLite file (null: "
                                    "<trainer.default_local_dir>/skillduet/bank.sqlite)", kind="path", optional=True)
    global_server: str = setting("skillduet_global_skills", "name of the Ray actor serving the Global "
                                 "cluster-wide", kind="str")
    teacher_logprobs: str = setting("actor", "where teacher and scoring log-probs are computed: actor (FSDP), "
                                             "rollout (prompt_logprobs prefills on the rollout servers; "
                                             "needs rollout.temperature=1) or compare (both; logs skillduet/check/* "
                                             "gaps)",
                                    choices=TEACHER_LOGPROB_SOURCES)
    replay_poll_interval_s: float | None = setting(None, "seconds between verl's polls of the rollout for finished "
                                                   "groups (null: verl's fixed 2.0; a step's rollout time is "
                                                   "rounded up to whole polls)", kind="number", lo=0, lo_open=True,
                                                   optional=True,
                                                   fix="expected seconds > 0 (e.g. 0.1), or null for verl's own 2.0")
    teacher_check_samples: int = setting(0, "each step, every batch task with a Local skill played this many times "
                                            "with it and without it on the rollout servers (never trained on); "
                                            "logged as teacher_check/* (0: off)", kind="int", lo=0)

    shared_prefix_forward: bool = setting(False, "the actor's padded forward (use_remove_padding=false) computes "
                                                 "each task group's shared prompt once per micro-batch (attention "
                                                 "skillduet_shared_prefix; exact up to summation order)", kind="bool")

    def __post_init__(self) -> None:
        validate_fields(self, "skillduet.")

    def resolved_bank_path(self, default_local_dir: str) -> str:
        """``bank_path``, or ``<trainer.default_local_dir>/skillduet/bank.sqlite``."""
        if self.bank_path:
            return os.path.abspath(os.path.expanduser(self.bank_path))
        return os.path.abspath(os.path.join(os.path.expanduser(default_local_dir), "skillduet", "bank.sqlite"))

    def to_section(self) -> dict[str, Any]:
        """The ``skillduet:`` section these settings read from (plain data, every key)."""
        adapter = {name: getattr(self, name) for name in ADAPTER_KEYS}
        return {**self.method.to_dict(), "env": dataclasses.asdict(self.env), **adapter}


#: The adapter's own keys of the section (the other keys are the method's, and ``env``).
ADAPTER_KEYS = tuple(f.name for f in dataclasses.fields(VerlSettings) if f.name not in ("method", "env"))


def default_section() -> dict[str, Any]:
    """The ``skillduet:`` section of the defaults: what a run reads where the user set nothing."""
    return VerlSettings().to_section()


def hydra_node() -> dict[str, Any]:
    """:func:`default_section` plus each deprecated name as null, so that a Hydra config that holds the node
    still takes the old name on the command line (and :func:`parse_settings` says what to write instead)."""
    node = default_section()
    for old in RENAMED:
        *parents, leaf = old.split(".")
        target = node
        for key in parents:
            target = target[key]
        target[leaf] = None
    return node


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
    """Build :class:`VerlSettings` from the ``skillduet:`` section (DictConfig or mapping; a key left out keeps
    its default; an old name is taken with a warning, see :data:`RENAMED`)."""
    data = take_renamed(_plain(section), RENAMED, "skillduet", default_section())
    method_keys = {f.name for f in dataclasses.fields(SkillDuetConfig)}
    check_keys("skillduet", data, method_keys | {"env", *ADAPTER_KEYS})
    env_data = data.pop("env", None) or {}
    if not isinstance(env_data, Mapping):
        invalid("skillduet.env", env_data, "expected a mapping")
    check_keys("skillduet.env", env_data, EnvSettings)
    env = EnvSettings(**{k: (dict(v) if k == "env_kwargs" else v) for k, v in env_data.items()})
    adapter = {key: data.pop(key) for key in ADAPTER_KEYS if key in data}
    try:
        method = SkillDuetConfig.from_dict(data)
    except ConfigError as err:
        raise err.under("skillduet") from None
    # What the verl adapter does not implement is refused, not silently ignored.
    if method.opd_agg != "token-mean":
        invalid("skillduet.opd_agg", method.opd_agg, "on verl the OPD term is aggregated like the PPO loss: set "
                "actor_rollout_ref.actor.loss_agg_mode instead")
    # verl generates freely (no choose mode) and takes the teacher log-probs after generation
    check_estimator(method, action_selection="generate", teacher_at="generation")
    teacher_source = adapter.get("teacher_logprobs", "actor")
    if method.opd_estimator == "topk" and method.needs_teacher_pass and teacher_source != "actor":
        invalid("skillduet.opd_estimator", method.opd_estimator, "the teacher's top-k tokens come from the actor's "
                "forward on verl: set skillduet.teacher_logprobs=actor (or opd_estimator=sampled)")
    return VerlSettings(method=method, env=env, **adapter)


def settings_from_trainer_config(config: Any) -> VerlSettings:
    """The SkillDuet settings of a whole verl config; a missing section means the defaults."""
    section = config.get("skillduet", None) if hasattr(config, "get") else None
    return parse_settings(section)


def plugin_enabled(config: Any) -> bool:
    """Whether ``trainer.plugins`` lists ``skillduet``."""
    plugins = config.trainer.get("plugins", None) or []
    if isinstance(plugins, str):
        plugins = [plugins]
    return PLUGIN_NAME in list(plugins)


def _leaves(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, Mapping) and value:
            out.update(_leaves(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def apply_plugins(config: Any) -> bool:
    """Switch a composed verl config to SkillDuet when ``trainer.plugins`` lists it; returns whether it did.

    Selects the ``skillduet_sync`` trainer and the ``skillduet_agent`` loop where the config still has verl's
    defaults and writes the whole ``skillduet:`` section (the defaults under what was given), validated, so that a
    bad value fails here, before Ray starts. Without the plugin a ``skillduet.*`` key that differs from the
    defaults is an error: nothing would read it.
    """
    from omegaconf import OmegaConf, open_dict  # lazy: omegaconf

    given = _plain(config.get("skillduet", None))
    if not plugin_enabled(config):
        defaults = _leaves(hydra_node())
        unread = [k for k, v in _leaves(given).items() if k not in defaults or defaults[k] != v]
        if unread:
            raise ConfigError(f"{', '.join('skillduet.' + k for k in unread)} set, but trainer.plugins does not "
                              f"list {PLUGIN_NAME}, so nothing would read it: add +trainer.plugins=[{PLUGIN_NAME}] "
                              "(or drop the skillduet settings)")
        return False
    if not config.trainer.get("use_v1", True):
        raise ConfigError("trainer.use_v1=false is invalid with trainer.plugins=[skillduet]: SkillDuet runs on "
                          "verl's V1 trainer; remove the override")
    settings = parse_settings(given)
    with open_dict(config):
        mode = config.trainer.v1.trainer_mode
        if mode == STOCK_TRAINER_MODE:
            config.trainer.v1.trainer_mode = TRAINER_NAME
        elif mode != TRAINER_NAME:
            raise ConfigError(f"trainer.v1.trainer_mode={mode!r} is invalid with trainer.plugins=[skillduet]: "
                              f"SkillDuet needs the synchronous trainer ({TRAINER_NAME}); drop the override")
        agent = config.actor_rollout_ref.rollout.agent
        if agent.default_agent_loop == STOCK_AGENT_LOOP:
            agent.default_agent_loop = AGENT_LOOP_NAME
        if settings.shared_prefix_forward:
            _use_shared_prefix_forward(config.actor_rollout_ref.model)
        config.skillduet = OmegaConf.create(settings.to_section())
    return True


def _use_shared_prefix_forward(model: Any) -> None:
    """``skillduet.shared_prefix_forward=true``: the actor (and reference) model's attention becomes
    ``skillduet_shared_prefix`` (``integrations.verl.shared_prefix``), which only the padded forward uses."""
    from skillduet_plugin.integrations.verl.shared_prefix import ATTN_IMPLEMENTATION  # lazy: torch

    if model.get("use_remove_padding", True):
        raise ConfigError("skillduet.shared_prefix_forward=true needs actor_rollout_ref.model.use_remove_padding="
                          "false (the padded forward it packs); set that, or drop shared_prefix_forward")
    if model.get("override_config") is None:
        model.override_config = {}
    chosen = model.override_config.get("attn_implementation", None)
    if chosen not in (None, "sdpa", ATTN_IMPLEMENTATION):
        raise ConfigError(f"skillduet.shared_prefix_forward=true replaces SDPA attention, but actor_rollout_ref.model."
                          f"override_config.attn_implementation={chosen!r}: set it to sdpa, or drop "
                          "shared_prefix_forward")
    model.override_config.attn_implementation = ATTN_IMPLEMENTATION


__all__ = ["ADAPTER_KEYS", "RENAMED", "TEACHER_LOGPROB_SOURCES", "EnvSettings", "VerlSettings", "apply_plugins",
           "default_section", "hydra_node", "parse_settings", "plugin_enabled", "settings_from_trainer_config"]
