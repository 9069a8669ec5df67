"""``SkillDuetGRPOConfig``: TRL's ``GRPOConfig`` plus the SkillDuet method settings and the rollout settings.

The method's knobs live in one ``skillduet`` mapping validated into :class:`~skillduet_plugin.config.SkillDuetConfig`
at construction (errors name the field as ``skillduet.<name>``); the rollout settings are plain fields.

TRL's own defaults assume a GPU. On a CPU-only machine pass at least ``bf16=False`` (TRL's default bf16 raises
without a GPU), ``gradient_checkpointing=False`` (pointless for small models), ``use_vllm=False`` (GPU only) and
``dataloader_pin_memory=False``; several CPU processes (``torchrun --nproc_per_node N``; ``accelerate launch --cpu``
starts only one process without MPI) also need ``use_cpu=True`` (gloo is then chosen), or TrainingArguments
sees a world of one. :data:`CPU_SAFE_DEFAULTS` holds all of these, plus small-run values for
``num_generations``, ``max_completion_length``, ``logging_steps`` and ``report_to``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from trl import GRPOConfig

from skillduet_plugin.config import ConfigError, SkillDuetConfig

TEACHER_AT = ("generation", "loss")
ACTION_SELECTIONS = ("generate", "choose")

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
    """GRPOConfig + SkillDuet.

    Attributes:
        skillduet: the method settings (see ``SkillDuetConfig``), e.g. ``{"opd_coef": 0.1, "selector": "strength"}``
            or ``preset("grpo").to_dict()``; validated here, available as :attr:`skillduet_config`.
        env_name: registered environment (``alfworld``, ``webshop`` or one added with ``envs.register_env``).
        env_kwargs: keywords for the environment factory (``envs.make(env_name, **env_kwargs)``).
        env_workers: environment worker processes; 0 runs the environments in the trainer process.
        max_turns: policy turns per episode at most.
        max_new_tokens_per_turn: generated tokens per policy turn at most.
        max_total_tokens: prompt + completion tokens per episode at most (None: the model's
            ``max_position_embeddings``). The completion (policy and environment tokens) is further capped by
            ``max_completion_length``.
        invalid_action_penalty: subtracted from an episode's reward per turn whose response did not parse to an
            admissible action.
        reward_scale: the environment reward is multiplied by this before the penalty.
        teacher_at: ``generation`` computes the OPD teacher log-probs once per rollout batch (cheapest);
            ``loss`` recomputes them with the live model in every loss call (fresh when ``num_iterations > 1``).
        skill_bank_dir: folder of the skill bank (default: ``output_dir``).
        logprob_token_budget: padded tokens per forward when scoring skills.
        action_selection: ``generate`` (default) samples each turn freely; ``choose`` is constrained selection
            among the environment's admissible actions (``rollout.choice``: each action's response is scored
            by the policy and one is drawn from the softmax of the sums at ``temperature``), used by the CPU
            demo's tiny model. The chosen tokens are trained on exactly as generated ones.
    """

    skillduet: dict[str, Any] | None = field(default=None, metadata={"help": "SkillDuet method settings."})
    env_name: str = field(default="alfworld", metadata={"help": "registered environment name"})
    env_kwargs: dict[str, Any] | None = field(default=None, metadata={"help": "environment factory keywords"})
    env_workers: int = field(default=0, metadata={"help": "environment worker processes (0 = in process)"})
    max_turns: int = field(default=30, metadata={"help": "policy turns per episode at most"})
    max_new_tokens_per_turn: int = field(default=256, metadata={"help": "generated tokens per turn at most"})
    max_total_tokens: int | None = field(default=None, metadata={"help": "prompt + completion tokens at most"})
    invalid_action_penalty: float = field(default=0.1, metadata={"help": "reward penalty per invalid action"})
    reward_scale: float = field(default=1.0, metadata={"help": "multiplier of the environment reward"})
    teacher_at: str = field(default="generation", metadata={"help": "generation | loss"})
    skill_bank_dir: str | None = field(default=None, metadata={"help": "skill bank folder (default output_dir)"})
    logprob_token_budget: int = field(default=16384, metadata={"help": "padded tokens per scoring forward"})
    action_selection: str = field(default="generate", metadata={"help": "generate | choose (admissible actions)"})

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
                raise ConfigError(f"skillduet.{err}") from None
        else:
            raise ConfigError(f"skillduet={raw!r} is invalid: expected a mapping of SkillDuet settings")
        self.skillduet = cfg.to_dict()  # plain data, so TrainingArguments.to_dict / to_json keep working
        self._skillduet_config = cfg
        if not isinstance(self.env_name, str) or not self.env_name:
            raise ConfigError(f"env_name={self.env_name!r} is invalid: expected a registered environment name")
        if self.env_kwargs is not None and not isinstance(self.env_kwargs, dict):
            raise ConfigError(f"env_kwargs={self.env_kwargs!r} is invalid: expected a mapping or None")
        self.env_kwargs = dict(self.env_kwargs or {})
        _int_at_least("env_workers", self.env_workers, 0)
        _int_at_least("max_turns", self.max_turns, 1)
        _int_at_least("max_new_tokens_per_turn", self.max_new_tokens_per_turn, 1)
        _int_at_least("logprob_token_budget", self.logprob_token_budget, 1)
        if self.max_total_tokens is not None:
            _int_at_least("max_total_tokens", self.max_total_tokens, 2)
        _number_at_least("invalid_action_penalty", self.invalid_action_penalty, 0.0)
        _number_at_least("reward_scale", self.reward_scale, 0.0, open_low=True)
        if self.teacher_at not in TEACHER_AT:
            raise ConfigError(f"teacher_at={self.teacher_at!r} is invalid: allowed values are {', '.join(TEACHER_AT)}")
        if self.action_selection not in ACTION_SELECTIONS:
            raise ConfigError(f"action_selection={self.action_selection!r} is invalid: allowed values are "
                              f"{', '.join(ACTION_SELECTIONS)}")
        if self.skill_bank_dir is None:
            self.skill_bank_dir = self.output_dir

    @property
    def skillduet_config(self) -> SkillDuetConfig:
        """The validated method settings."""
        return self._skillduet_config


def _int_at_least(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{name}={value!r} is invalid: expected an integer >= {low}")


def _number_at_least(name: str, value: Any, low: float, open_low: bool = False) -> None:
    bad = isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
    if bad or (value <= low if open_low else value < low):
        raise ConfigError(f"{name}={value!r} is invalid: expected a finite number {'>' if open_low else '>='} {low}")
