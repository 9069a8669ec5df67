"""``SkillDuetGRPOConfig``: TRL's ``GRPOConfig`` plus the SkillDuet method settings and the rollout settings.

The method's knobs live in one ``skillduet`` mapping validated into :class:`~skillduet_plugin.config.SkillDuetConfig`
at construction (errors name the field as ``skillduet.<name>``); the rollout settings are plain fields.

With ``use_vllm=True`` the episodes are sampled by TRL's in-process vLLM engine (``vllm_mode="colocate"``, the
only mode the multi-turn rollout supports; it also runs on vLLM's CPU build, see docs/vllm.md).

TRL's own defaults assume a GPU. On a CPU-only machine pass at least ``bf16=False`` (TRL's default bf16 raises
without a GPU), ``gradient_checkpointing=False`` (pointless for small models), ``use_vllm=False`` (unless vLLM's
CPU build is installed) and
``dataloader_pin_memory=False``; several CPU processes (``torchrun --nproc_per_node N``; ``accelerate launch --cpu``
starts only one process without MPI) also need ``use_cpu=True`` (gloo is then chosen), or TrainingArguments
sees a world of one. :data:`CPU_SAFE_DEFAULTS` holds all of these, plus small-run values for
``num_generations``, ``max_completion_length``, ``logging_steps`` and ``report_to``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trl import GRPOConfig

from skillduet_plugin.config import SkillDuetConfig, check_estimator
from skillduet_plugin.core.episode import episode_checks, episode_field
from skillduet_plugin.core.settings import ConfigError, check, invalid, validate_fields
from skillduet_plugin.envs.registry import env_names

#: GRPOConfig keywords for a CPU-only machine (merge under your own values: ``{**CPU_SAFE_DEFAULTS, **mine}``).
CPU_SAFE_DEFAULTS: dict[str, Any] = {
    "bf16": False,
    "use_cpu": True,
    "gradient_checkpointing": False,
    "use_vllm": False,
    "dataloader_pin_memory": False,
    "report_to": "none",
    "num_generations": 4,
    "max_completion_length": 256,
    "logging_steps": 1,
}


@dataclass
class SkillDuetGRPOConfig(GRPOConfig):
    """GRPOConfig + SkillDuet; each field's help text (``metadata["help"]``) is its documentation."""

    skillduet: dict[str, Any] | None = field(default=None, metadata={"help": (
        "the method settings (SkillDuetConfig keys), e.g. {'opd_coef': 0.1, 'selector': 'strength'} or "
        "preset('grpo').to_dict(); validated here, available as skillduet_config")})
    env_name: str = field(default="alfworld", metadata={"help": (
        "registered environment (alfworld, webshop, toy or one added with envs.register_env)")})
    env_kwargs: dict[str, Any] | None = field(default=None, metadata={"help": (
        "keywords of the environment factory (envs.make(env_name, **env_kwargs))")})
    env_workers: int = field(default=0, metadata={"help": (
        "environment worker processes; 0 runs the environments in the trainer process")})
    # The episode settings (core.episode): the method's defaults; their constraints are checked in __post_init__
    # (TRL's HfArgumentParser turns field metadata into argparse keywords, so it holds the help text only).
    max_turns: int = episode_field("max_turns", with_check=False)
    max_new_tokens_per_turn: int = episode_field("max_new_tokens_per_turn", with_check=False)
    max_total_tokens: int | None = episode_field("max_total_tokens", help="the completion (policy and environment "
                                                 "tokens) is further capped by max_completion_length",
                                                 with_check=False)
    invalid_action_penalty: float = episode_field("invalid_action_penalty", with_check=False)
    reward_scale: float = field(default=1.0, metadata={"help": (
        "the environment reward is multiplied by this before the penalty")})
    teacher_at: str = episode_field("teacher_at", with_check=False)
    skill_bank_dir: str | None = field(default=None,
                                       metadata={"help": "folder of the skill bank (default: output_dir)"})
    logprob_token_budget: int = field(default=16384, metadata={"help": (
        "padded tokens per forward of the OPD teacher pass and of skill scoring")})
    action_selection: str = episode_field("action_selection", with_check=False)
    teacher_check_samples: int = field(default=0, metadata={"help": (
        "each step, every batch task with a Local skill played this many times with it and without it (never "
        "trained on, seeded apart); logged as teacher_check/* (0: off)")})

    opd_update_share: bool = field(default=False, metadata={"help": (
        "each optimizer step, log how much of the update OPD makes (norms of the policy and OPD terms' gradients "
        "summed over its micro-batches: opd/update_*); two extra backward passes, the step unchanged")})

    def __post_init__(self) -> None:
        super().__post_init__()
        raw = self.skillduet
        if raw is None:
            cfg = SkillDuetConfig()
        elif isinstance(raw, SkillDuetConfig):
            cfg = raw
        elif isinstance(raw, dict):
            try:
                cfg = SkillDuetConfig.from_dict(raw)
            except ConfigError as err:
                raise err.under("skillduet") from None
        else:
            invalid("skillduet", raw, "expected a mapping of SkillDuet settings")
        self.skillduet = cfg.to_dict()  # plain data, so TrainingArguments.to_dict / to_json keep working
        self._skillduet_config = cfg
        # TRL's HfArgumentParser turns metadata into argparse keywords, so the constraints live here, not there.
        validate_fields(self, checks=_CHECKS)
        check("env_name", self.env_name, choices=env_names())
        check_estimator(cfg, self.action_selection, self.teacher_at)
        if self.use_vllm and self.vllm_mode != "colocate":
            invalid("vllm_mode", self.vllm_mode, "the SkillDuet rollout generates its multi-turn episodes turn by "
                    "turn in the trainer process: use vllm_mode='colocate' (or use_vllm=False)")
        self.env_kwargs = dict(self.env_kwargs or {})
        if self.skill_bank_dir is None:
            self.skill_bank_dir = self.output_dir

    @property
    def skillduet_config(self) -> SkillDuetConfig:
        """The validated method settings."""
        return self._skillduet_config


_CHECKS: dict[str, dict[str, Any]] = {
    **episode_checks(),
    "env_kwargs": {"kind": "mapping", "optional": True},
    "env_workers": {"kind": "int", "lo": 0},
    "teacher_check_samples": {"kind": "int", "lo": 0},
    "opd_update_share": {"kind": "bool"},
    "logprob_token_budget": {"kind": "int", "lo": 1},
    "reward_scale": {"lo": 0, "lo_open": True},
}
