"""The one validated configuration of the SkillDuet method, shared by the TRL and verl adapters.

Every field is checked at construction; a bad value raises :class:`ConfigError` naming the field, the value
and what is allowed, so a typo in a recipe fails before a GPU is allocated.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

SELECTORS = ("strength", "utility", "contrast", "random")
HELDOUT_POLICIES = ("teacher", "same_scope", "same_scope_other_tasks", "any")
SCOPE_KINDS = ("task_type", "task", "single")
SKILL_POSITIONS = ("after_task", "system", "user_start")
OPD_AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")
BACKEND_KINDS = ("offline", "openai", "transformers")


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the field, the value and the fix."""


def _fail(name: str, value: Any, allowed: str) -> None:
    raise ConfigError(f"{name}={value!r} is invalid: {allowed}")


def _check_number(name: str, value: Any, *, lo: float | None = None, hi: float | None = None,
                  lo_open: bool = False, hi_open: bool = False, integer: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        _fail(name, value, "expected a number")
    if integer and not float(value).is_integer():
        _fail(name, value, "expected an integer")
    if isinstance(value, float) and not math.isfinite(value):
        _fail(name, value, "expected a finite number")
    if lo is not None and (value <= lo if lo_open else value < lo):
        _fail(name, value, f"must be {'>' if lo_open else '>='} {lo}")
    if hi is not None and (value >= hi if hi_open else value > hi):
        _fail(name, value, f"must be {'<' if hi_open else '<='} {hi}")


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        _fail(name, value, f"allowed values are {', '.join(choices)}")


@dataclass
class BackendConfig:
    """How to reach the analyzer or synthesizer LLM.

    ``offline`` is the deterministic rule-based backend (CPU runs, tests); ``openai`` is any
    OpenAI-compatible server (``vllm serve``, SGLang, a hosted API); ``transformers`` runs a model in process
    (``model="policy"`` reuses the policy being trained, the "self-analyzer" mode).
    """

    kind: str = "offline"
    model: str = ""
    base_url: str = "http://127.0.0.1:8000/v1"
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = 120.0
    max_retries: int = 3
    backoff_s: float = 1.0
    concurrency: int = 8
    temperature: float = 0.3
    max_tokens: int = 1024

    def validate(self, prefix: str) -> None:
        _check_choice(f"{prefix}.kind", self.kind, BACKEND_KINDS)
        if self.kind in ("openai", "transformers") and not self.model:
            _fail(f"{prefix}.model", self.model,
                  f"a model name is required when {prefix}.kind={self.kind!r}")
        if self.kind == "openai" and not str(self.base_url).startswith(("http://", "https://")):
            _fail(f"{prefix}.base_url", self.base_url, "expected an http(s) URL such as http://host:8000/v1")
        _check_number(f"{prefix}.timeout_s", self.timeout_s, lo=0, lo_open=True)
        _check_number(f"{prefix}.max_retries", self.max_retries, lo=0, integer=True)
        _check_number(f"{prefix}.backoff_s", self.backoff_s, lo=0)
        _check_number(f"{prefix}.concurrency", self.concurrency, lo=1, integer=True)
        _check_number(f"{prefix}.temperature", self.temperature, lo=0)
        _check_number(f"{prefix}.max_tokens", self.max_tokens, lo=1, integer=True)

    @property
    def api_key(self) -> str:
        return os.environ.get(self.api_key_env, "EMPTY")


@dataclass
class SkillDuetConfig:
    """The SkillDuet method's knobs (paper defaults).

    Attributes:
        opd_coef: lambda_OPD, weight of the gated on-policy distillation term. 0 turns OPD off.
        gate_beta: beta of the confidence gate sigmoid(beta * (t - s)); the paper uses 5.
        opd_agg: how per-token OPD terms are aggregated (verl's modes; the paper's Eq. 1 is token-mean).
        consolidation_interval: consolidate Local candidates into the Global every N training steps.
        keep_ratio: fraction of deduplicated candidates kept per consolidation (top by the selector).
        selector: which score ranks candidates: strength (paper default), utility, contrast, random.
        use_global: inject the Global into rollout prompts. False is the "Local-only" ablation.
        extract_local: run the analyzer each step. False (with opd_coef=0, use_global=False) is plain GRPO.
        scope: what a Global serves: the task type (default), each task, or one Global for everything.
        heldout: which trajectories score a candidate. ``teacher`` (default): the trajectories that have the
            candidate as OPD teacher context and did not produce it, read from the teacher pass at no extra
            forward, plus budgeted extra forwards for candidates without any (``skills.teacher_scoring``);
            the pairwise estimator (one forward per candidate and trajectory): ``same_scope`` (same scope minus
            its sources), ``same_scope_other_tasks`` (minus its whole task group), ``any`` (any but its sources).
        max_heldout: cap on |H_L| per candidate for the pairwise estimator and the extra rows of ``teacher``.
        scoring_budget: with ``heldout=teacher``, the extra scoring forwards of a step process at most this
            fraction of the step's rollout tokens (prompt + completion); 0 scores from the teacher pass only.
        skill_token_budget: token budget of a scope's Global (policy tokenizer); longer Globals are compressed.
        local_skill_token_budget: token budget of one Local skill inside a teacher prompt.
        max_skill_chars: hard cap on any skill text coming back from an LLM (untrusted output).
        skill_position: where skills are inserted in the first user turn.
        dedupe_threshold: similarity above which two candidates count as near-duplicates.
        analyzer / synthesizer: LLM backends.
        seed: seeds the random selector and every other stochastic choice of the lifecycle.
    """

    opd_coef: float = 0.1
    gate_beta: float = 5.0
    opd_agg: str = "token-mean"
    consolidation_interval: int = 10
    keep_ratio: float = 0.5
    selector: str = "strength"
    use_global: bool = True
    extract_local: bool = True
    scope: str = "task_type"
    heldout: str = "teacher"
    max_heldout: int = 8
    scoring_budget: float = 0.5
    skill_token_budget: int = 1024
    local_skill_token_budget: int = 256
    max_skill_chars: int = 4000
    skill_position: str = "after_task"
    dedupe_threshold: float = 0.9
    analyzer: BackendConfig = field(default_factory=BackendConfig)
    synthesizer: BackendConfig = field(default_factory=BackendConfig)
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("analyzer", "synthesizer"):
            value = getattr(self, name)
            if isinstance(value, Mapping):
                setattr(self, name, _backend_from_dict(dict(value), name))
            elif not isinstance(value, BackendConfig):
                _fail(name, value, "expected a mapping of backend settings or a BackendConfig")
        self.validate()

    def validate(self) -> None:
        _check_number("opd_coef", self.opd_coef, lo=0)
        _check_number("gate_beta", self.gate_beta, lo=0)
        _check_choice("opd_agg", self.opd_agg, OPD_AGGREGATIONS)
        _check_number("consolidation_interval", self.consolidation_interval, lo=1, integer=True)
        _check_number("keep_ratio", self.keep_ratio, lo=0, hi=1, lo_open=True)
        _check_choice("selector", self.selector, SELECTORS)
        for flag in ("use_global", "extract_local"):
            if not isinstance(getattr(self, flag), bool):
                _fail(flag, getattr(self, flag), "expected true or false")
        _check_choice("scope", self.scope, SCOPE_KINDS)
        _check_choice("heldout", self.heldout, HELDOUT_POLICIES)
        _check_number("max_heldout", self.max_heldout, lo=1, integer=True)
        _check_number("scoring_budget", self.scoring_budget, lo=0)
        _check_number("skill_token_budget", self.skill_token_budget, lo=16, integer=True)
        _check_number("local_skill_token_budget", self.local_skill_token_budget, lo=8, integer=True)
        _check_number("max_skill_chars", self.max_skill_chars, lo=32, integer=True)
        _check_choice("skill_position", self.skill_position, SKILL_POSITIONS)
        _check_number("dedupe_threshold", self.dedupe_threshold, lo=0, hi=1, lo_open=True)
        _check_number("seed", self.seed, lo=0, integer=True)
        self.analyzer.validate("analyzer")
        self.synthesizer.validate("synthesizer")
        if self.opd_coef > 0 and not self.extract_local:
            _fail("extract_local", self.extract_local,
                  "OPD needs Local skills: set extract_local=true or opd_coef=0")
        if self.use_global and not self.extract_local:
            _fail("use_global", self.use_global,
                  "the Global is built from Local skills: set extract_local=true or use_global=false")

    @property
    def is_plain_grpo(self) -> bool:
        """True for the baseline configuration (no OPD, no Global, no extraction)."""
        return self.opd_coef == 0 and not self.use_global and not self.extract_local

    # ------------------------------------------------------------------ loading / saving
    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "SkillDuetConfig":
        """Build from a plain mapping (e.g. the ``skillduet:`` section of a YAML or Hydra config)."""
        data = dict(data or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(
                f"unknown SkillDuet setting(s) {', '.join(unknown)}: allowed keys are {', '.join(sorted(known))}")
        return cls(**data)

    @classmethod
    def from_yaml(cls, path: str | os.PathLike) -> "SkillDuetConfig":
        import yaml

        text = Path(path).read_text()
        data = yaml.safe_load(text) or {}
        if not isinstance(data, Mapping):
            raise ConfigError(f"{path}: expected a mapping of SkillDuet settings, got {type(data).__name__}")
        if "skillduet" in data and isinstance(data["skillduet"], Mapping):
            data = data["skillduet"]
        return cls.from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **changes: Any) -> "SkillDuetConfig":
        data = self.to_dict()
        data.update(changes)
        return SkillDuetConfig.from_dict(data)


def _backend_from_dict(data: dict[str, Any], prefix: str) -> BackendConfig:
    known = {f.name for f in fields(BackendConfig)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(
            f"unknown {prefix} setting(s) {', '.join(f'{prefix}.{k}' for k in unknown)}: "
            f"allowed keys are {', '.join(sorted(known))}")
    return BackendConfig(**data)


def preset(name: str, **overrides: Any) -> SkillDuetConfig:
    """Named configurations from the paper's comparisons.

    ``skillduet`` (defaults), ``local_only`` (OPD with Local skills, no Global), ``random`` (Random selector),
    ``grpo`` (plain GRPO: no extraction, no OPD, no Global).
    """
    presets: dict[str, dict[str, Any]] = {
        "skillduet": {},
        "local_only": {"use_global": False},
        "random": {"selector": "random"},
        "grpo": {"opd_coef": 0.0, "use_global": False, "extract_local": False},
    }
    if name not in presets:
        raise ConfigError(f"preset={name!r} is invalid: allowed values are {', '.join(presets)}")
    data = dict(presets[name])
    data.update(overrides)
    return SkillDuetConfig.from_dict(data)
