"""The one validated configuration of the SkillDuet method, shared by the TRL and verl adapters.

Every field is checked at construction; a bad value raises :class:`ConfigError` naming the field, the value
and what is allowed, so a typo in a recipe fails before a GPU is allocated.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, NamedTuple

import yaml

from skillduet_plugin.core.names import OPD_AGGREGATIONS, OPD_ESTIMATORS, SCOPE_KEYS
from skillduet_plugin.core.selectors import SELECTORS
from skillduet_plugin.core.settings import ConfigError, check_keys, invalid, setting, validate_fields
from skillduet_plugin.llm.config import BackendConfig

HELDOUT_POLICIES = ("teacher", "same_scope", "same_scope_other_tasks", "any")
SCOPE_KINDS = tuple(SCOPE_KEYS)
SKILL_POSITIONS = ("after_task", "system", "user_start")


@dataclass
class SkillDuetConfig:
    """The SkillDuet method's knobs (paper defaults); each field's help text is its documentation."""

    opd_coef: float = setting(0.1, "lambda_OPD, weight of the gated on-policy distillation term; 0 turns OPD off",
                              lo=0)
    gate_beta: float = setting(5.0, "beta of the confidence gate sigmoid(beta * (t - s)); the paper uses 5", lo=0)
    opd_estimator: str = setting("sampled", "what the OPD term distils: sampled (Eq. 1 on the sampled token), "
                                            "choices (its expectation over a turn's admissible actions; "
                                            "action_selection=choose only) or topk (the teacher's opd_topk top "
                                            "tokens)", choices=OPD_ESTIMATORS)
    opd_topk: int = setting(8, "opd_estimator=topk: the teacher's most likely tokens per position it sums over",
                            kind="int", lo=1)
    policy_loss_coef: float = setting(1.0, "weight of the RL policy loss (GRPO/PPO); 1 is the method, 0 trains on "
                                      "the OPD term alone (a diagnostic of how far distillation moves the student; "
                                      "TRL)", lo=0)
    opd_agg: str = setting("token-mean", "how per-token OPD terms are aggregated on TRL (the paper's Eq. 1 is "
                           "token-mean); verl aggregates with actor_rollout_ref.actor.loss_agg_mode instead",
                           choices=OPD_AGGREGATIONS)
    consolidation_interval: int = setting(10, "consolidate Local candidates into the Global every N training steps",
                                          kind="int", lo=1)
    keep_ratio: float = setting(0.5, "fraction of deduplicated candidates kept per consolidation (top by the "
                                "selector)", lo=0, hi=1, lo_open=True)
    selector: str = setting("strength", "which score ranks candidates: strength (paper default), utility, "
                            "contrast, random, or any selector registered with core.selectors.register_selector",
                            choices=SELECTORS)
    use_global: bool = setting(True, "inject the Global into rollout prompts; false is the Local-only ablation",
                               kind="bool")
    extract_local: bool = setting(True, "run the analyzer each step; false (with opd_coef=0, use_global=false) is "
                                  "plain GRPO", kind="bool")
    scope: str = setting("task_type", "what a Global serves: the task type, each task, or one Global for "
                         "everything", choices=SCOPE_KINDS)
    heldout: str = setting("teacher", "which trajectories score a candidate: teacher (default: the teacher pass's "
                                      "rows plus budgeted forwards, skills.teacher_scoring) or, one forward per "
                                      "pair, same_scope, same_scope_other_tasks or any", choices=HELDOUT_POLICIES)
    max_heldout: int = setting(8, "cap on |H_L| per candidate for the pairwise estimator and the extra rows of "
                               "teacher", kind="int", lo=1)
    scoring_budget: float = setting(0.5, "with heldout=teacher, the extra scoring forwards of a step process at most "
                                    "this fraction of the step's rollout tokens (prompt + completion); 0 scores "
                                    "from the teacher pass only", lo=0)
    skill_token_budget: int = setting(1024, "token budget of a scope's Global (policy tokenizer); longer Globals "
                                      "are compressed", kind="int", lo=16)
    local_skill_token_budget: int = setting(256, "token budget of one Local skill inside a teacher prompt",
                                            kind="int", lo=8)
    max_skill_chars: int = setting(4000, "hard cap on any skill text coming back from an LLM (untrusted output)",
                                   kind="int", lo=32)
    skill_position: str = setting("after_task", "where skills are inserted in the first user turn",
                                  choices=SKILL_POSITIONS)
    dedupe_threshold: float = setting(0.9, "similarity above which two candidates count as near-duplicates",
                                      lo=0, hi=1, lo_open=True)
    analyzer_max_requests: int = setting(0, "analyzer requests per step at most (0: no bound); the groups left out "
                                            "get no Local skill that step (metric skills/step_analyzer_capped)",
                                         kind="int", lo=0)
    analyzer: BackendConfig = field(default_factory=BackendConfig, metadata={"help": "the analyzer LLM backend"})
    synthesizer: BackendConfig = field(default_factory=BackendConfig,
                                       metadata={"help": "the synthesizer LLM backend"})
    seed: int = setting(0, "seeds the random selector and every other stochastic choice of the lifecycle",
                        kind="int", lo=0)

    def __post_init__(self) -> None:
        for name in ("analyzer", "synthesizer"):
            value = getattr(self, name)
            if isinstance(value, Mapping):
                setattr(self, name, BackendConfig.from_dict(value, name))
            elif not isinstance(value, BackendConfig):
                invalid(name, value, "expected a mapping of backend settings or a BackendConfig")
        self.validate()

    def validate(self) -> None:
        validate_fields(self)
        self.analyzer.validate("analyzer")
        self.synthesizer.validate("synthesizer")
        if self.policy_loss_coef == 0 and self.opd_coef == 0:
            invalid("policy_loss_coef", self.policy_loss_coef, "with opd_coef=0 nothing would be trained: set "
                    "policy_loss_coef > 0 or opd_coef > 0")
        if self.opd_coef > 0 and not self.extract_local:
            invalid("extract_local", self.extract_local, "OPD needs Local skills: set extract_local=true or opd_coef=0")
        if self.use_global and not self.extract_local:
            invalid("use_global", self.use_global,
                    "the Global is built from Local skills: set extract_local=true or use_global=false")

    @property
    def is_plain_grpo(self) -> bool:
        """True for the baseline configuration (no OPD, no Global, no extraction)."""
        return self.opd_coef == 0 and not self.use_global and not self.extract_local

    @property
    def needs_teacher_pass(self) -> bool:
        """True when a step computes teacher log-probs (OPD is on; ``skills.teacher_plan`` says for which rows)."""
        return self.opd_coef > 0

    @property
    def scores_from_teacher_pass(self) -> bool:
        """True when Strength reads the rows of the teacher pass (``heldout="teacher"`` with a teacher pass);
        otherwise every scoring row is a forward of its own (``skills.teacher_scoring``, ``skills.scoring``)."""
        return self.heldout == "teacher" and self.needs_teacher_pass

    # ------------------------------------------------------------------ loading / saving
    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "SkillDuetConfig":
        """Build from a plain mapping (e.g. the ``skillduet:`` section of a YAML or Hydra config)."""
        data = dict(data or {})
        check_keys("", data, cls)
        return cls(**data)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> "SkillDuetConfig":
        """The settings given as ``SKILLDUET_<FIELD>`` variables (``SKILLDUET_OPD_COEF=0.2``; values read as
        YAML scalars), the defaults for the rest: how a patched legacy verl actor (``patches/``) gets them."""
        environ = os.environ if environ is None else environ
        names = [f.name for f in dataclasses.fields(cls) if f.name not in ("analyzer", "synthesizer")]
        return cls.from_dict({n: yaml.safe_load(environ[f"SKILLDUET_{n.upper()}"]) for n in names
                              if f"SKILLDUET_{n.upper()}" in environ})

    @classmethod
    def from_yaml(cls, path: str | os.PathLike) -> "SkillDuetConfig":
        data = read_yaml(path)
        if "skillduet" in data and isinstance(data["skillduet"], Mapping):
            data = data["skillduet"]
        return cls.from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **changes: Any) -> "SkillDuetConfig":
        data = self.to_dict()
        data.update(changes)
        return SkillDuetConfig.from_dict(data)


def check_estimator(cfg: SkillDuetConfig, action_selection: str, teacher_at: str) -> None:
    """The OPD estimator against how the run acts and when it computes teacher log-probs (one ConfigError line)."""
    if not cfg.needs_teacher_pass or cfg.opd_estimator == "sampled":
        return
    if cfg.opd_estimator == "choices" and action_selection != "choose":
        invalid("skillduet.opd_estimator", cfg.opd_estimator, "the expectation over a turn's admissible actions needs "
                "action_selection=choose: use opd_estimator=topk (or sampled) when the policy generates freely")
    if teacher_at != "generation":
        invalid("skillduet.opd_estimator", cfg.opd_estimator, "the teacher's distributions are computed once per "
                "rollout batch: set teacher_at=generation (or opd_estimator=sampled)")


def read_yaml(path: str | os.PathLike, what: str = "settings") -> dict[str, Any]:
    """A YAML config file as a mapping; a missing file, a syntax error or a non-mapping is one ConfigError line
    naming the file (and the line and column of a syntax error)."""

    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"config file {str(path)!r} not found: pass an existing YAML file")
    try:
        data = yaml.safe_load(file.read_text()) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise ConfigError(f"config file {str(path)!r}{where}: YAML syntax error ({problem}): fix the YAML "
                          f"there (indentation, a missing ':' or an unclosed quote or bracket)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {str(path)!r} cannot be read ({exc}): pass a readable UTF-8 YAML file") \
            from None
    if not isinstance(data, Mapping):
        raise ConfigError(f"config file {str(path)!r}: expected a mapping of {what} at the top level, got "
                          f"{type(data).__name__}")
    return dict(data)


class MethodPreset(NamedTuple):
    """A named configuration from the paper's comparisons: its label in reports and the switches it sets."""

    label: str
    settings: dict[str, Any]


#: The method presets, declared once: :func:`preset`, ``skillduet train``'s ``skillduet.method`` and the arms of
#: ``skillduet study`` read this table. Each spells out every switch it depends on (the others keep the paper
#: defaults), so that a study's base config that sets one of them cannot turn an ablation back into the full method.
METHOD_PRESETS: dict[str, MethodPreset] = {
    "skillduet": MethodPreset("SkillDuet (Strength)", {"selector": "strength", "use_global": True,
                                                       "extract_local": True}),
    "local_only": MethodPreset("Local-only OPD", {"use_global": False, "extract_local": True}),
    "random": MethodPreset("SkillDuet (Random)", {"selector": "random", "use_global": True, "extract_local": True}),
    "grpo": MethodPreset("GRPO", {"opd_coef": 0.0, "use_global": False, "extract_local": False}),
}


def preset(name: str, **overrides: Any) -> SkillDuetConfig:
    """The SkillDuetConfig of a method preset (:data:`METHOD_PRESETS`), ``overrides`` applied on top.

    ``skillduet`` (paper defaults), ``local_only`` (OPD with Local skills, no Global), ``random`` (Random selector),
    ``grpo`` (plain GRPO: no extraction, no OPD, no Global).
    """
    if name not in METHOD_PRESETS:
        invalid("preset", name, f"allowed values are {', '.join(METHOD_PRESETS)}")
    data = dict(METHOD_PRESETS[name].settings)
    data.update(overrides)
    return SkillDuetConfig.from_dict(data)
