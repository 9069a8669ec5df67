"""The validated settings of one ``skillduet train`` run: YAML file + dotted ``key=value`` overrides.

The defaults ARE the CPU demo (tiny model, generated ALFWorld games, offline analyzer, consolidation every 3
steps so that the 9-step run consolidates three times). A config file only lists what differs. Every value
is checked when the config is built; a bad one raises :class:`ConfigError` naming the field and the fix.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

from skillduet_plugin.config import ConfigError, SkillDuetConfig, preset
from skillduet_plugin.config import _check_choice as _choice
from skillduet_plugin.config import _fail

ENVS = ("alfworld", "webshop")
METHODS = ("skillduet", "local_only", "random", "grpo")
DEVICES = ("auto", "cpu", "cuda")
PRECISIONS = ("auto", "fp32", "bf16")
TEACHER_AT = ("generation", "loss")
ACTION_SELECTIONS = ("auto", "generate", "choose")
EXPERTS = ("search", "walkthrough")
# Default evaluation panel per env (the fixed, deterministic validation split).
DEFAULT_PANEL = {"alfworld": "valid_unseen", "webshop": "test"}
# Demo defaults that differ per environment (the RunConfig defaults are ALFWorld's): applied by
# ``load_run_config`` when the run's env is this one and neither the file nor an override set the key.
# WebShop pages are long (a results page is ~1,000 tokens): fewer turns, a longer context, one shopper episode
# per goal over many goals. Its episodes are long, so cloning needs its steps: measured on 32 goals, 60 steps
# left the cross-entropy at 1.65 and the clone won no sampled episode, 200 steps reached 0.14 and won some.
ENV_DEMO_DEFAULTS: dict[str, dict[tuple[str, ...], Any]] = {
    "webshop": {("eval_tasks",): 16, ("train_tasks",): 256, ("max_turns",): 8, ("max_total_tokens",): 4096,
                ("warm_start", "games"): 128, ("warm_start", "episodes_per_game"): 1, ("warm_start", "steps"): 200},
}

# The demo's method settings: paper defaults except a short consolidation interval (3 steps, so the 9-step
# CPU run consolidates 3 times) and small skill budgets that fit the tiny model's context.
DEMO_SKILLDUET: dict[str, Any] = {
    "method": "skillduet",
    "consolidation_interval": 3,
    "skill_token_budget": 160,
    "local_skill_token_budget": 96,
    "max_heldout": 4,
}


def _int(name: str, value: Any, lo: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        _fail(name, value, f"expected an integer >= {lo}")


def _num(name: str, value: Any, lo: float, lo_open: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < lo or (lo_open and value == lo):
        _fail(name, value, f"expected a number {'>' if lo_open else '>='} {lo}")


def _bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        _fail(name, value, "expected true or false")


@dataclass
class WarmStartConfig:
    """Behaviour cloning on expert episodes before RL, so that a small model sometimes succeeds.

    Attributes:
        enabled: ``auto`` (on for ``tiny`` models, off for real checkpoints), true or false.
        games: training games whose expert episodes are cloned (taken from the start of the train split).
        expert: ``search`` (ALFWorld: the searching expert of ``envs.alfworld.expert``, which looks for the
            target like a player who does not know where it is, so the clone learns to search) or
            ``walkthrough`` (the game file's stored plan, straight to the hidden object). WebShop: ``search`` is
            the searching shopper of ``envs.webshop.expert`` (reads the instruction only), ``walkthrough`` a
            shopper that goes straight to the goal product.
        episodes_per_game: expert episodes per game (the searching expert visits receptacles in a different
            seeded order in each).
        steps: optimizer steps, always all of them: the budget is in steps, never in time, so a busy machine
            takes longer but makes the same model (a time estimate and a progress bar say how long). The
            result is cached by a hash of everything it depends on; an interrupted warm start is never reused.
        batch_size: episodes per optimizer step.
        learning_rate: AdamW learning rate.
        skill_fraction: share of episodes whose first prompt carries a skill section (inserted at message
            level, as the RL loop inserts the Global), so the model learns to read that section.
        skill_token_budget: token budget of those sections. The warm start's own setting, not the method's
            ``skillduet.skill_token_budget``: runs of different methods start from the same model.
    """

    enabled: Any = "auto"
    games: int = 72
    expert: str = "search"
    episodes_per_game: int = 2
    steps: int = 700
    batch_size: int = 4
    learning_rate: float = 6e-3
    skill_fraction: float = 0.5
    skill_token_budget: int = 160

    def validate(self) -> None:
        if self.enabled not in ("auto", True, False):
            _fail("warm_start.enabled", self.enabled, "expected auto, true or false")
        _int("warm_start.games", self.games, 1)
        _choice("warm_start.expert", self.expert, EXPERTS)
        _int("warm_start.episodes_per_game", self.episodes_per_game, 1)
        _int("warm_start.steps", self.steps, 0)
        _int("warm_start.batch_size", self.batch_size, 1)
        _num("warm_start.learning_rate", self.learning_rate, 0, lo_open=True)
        _num("warm_start.skill_fraction", self.skill_fraction, 0)
        if self.skill_fraction > 1:
            _fail("warm_start.skill_fraction", self.skill_fraction, "expected a fraction in [0, 1]")
        _int("warm_start.skill_token_budget", self.skill_token_budget, 16)


@dataclass
class RunConfig:
    """One training run (defaults: the CPU demo).

    Attributes:
        name: run name (the run directory is ``runs/<timestamp>-<name>`` unless ``output_dir`` is set).
        model: a local model folder, or ``tiny`` / ``tiny:<size>`` (built offline and cached).
        env / env_kwargs / data_dir: the environment, its extra keywords, and its data (None: generated
            ALFWorld games / the synthetic WebShop catalogue).
        train_split / train_tasks: tasks trained on (``train_tasks`` = how many, from the start; 0 = all).
        eval_panel / eval_tasks: the fixed evaluation panel (split, size; 0 = all) for before/after success.
        steps: RL steps. tasks_per_step x num_generations episodes are played per step.
        num_generations: group size G (rollouts per task).
        max_turns / max_new_tokens_per_turn / max_total_tokens: episode limits.
        invalid_action_penalty: reward subtracted per unparsable / inadmissible action.
        learning_rate / temperature / seed: optimisation and sampling.
        teacher_at: when OPD teacher log-probs are computed (``generation`` or live in the ``loss``).
        action_selection: how the policy acts each turn, in rollouts and panel evaluations. ``generate``: free
            generation (real runs). ``choose``: constrained selection among the admissible actions, each one's
            warm-start-format response scored by the policy (sampled from the softmax of the summed log-probs at
            ``temperature`` in rollouts, the best one in evaluations); the CPU demo's tiny model cannot copy long
            action strings, so it plays this way (on WebShop the search page then offers queries built from the
            instruction, see ``envs.webshop.queries``). ``auto``: choose for ``tiny`` models, generate otherwise.
        skillduet: the method's settings (SkillDuetConfig keys) plus ``method`` =
            skillduet | local_only | random | grpo (a preset the other keys override).
        warm_start: behaviour-cloning warm start (see :class:`WarmStartConfig`).
        eval_before / eval_after: measure success on the panel before and after RL.
        save_steps: checkpoint every N steps (0: only the final model).
        output_dir: run directory (default ``runs/<timestamp>-<name>``).
        device / precision: ``auto`` picks cuda + bf16 when available, else cpu + fp32.
        env_workers: parallel environment worker processes (0: play in this process).
        threads: torch CPU threads (0: auto = one per two cores on CPU, torch's default on a GPU). Fixed per
            machine, never chosen by load, so the results do not depend on it; half the cores, so another busy
            process slows a run down instead of stalling every operator (bench/threads.py).
        trl: extra GRPOConfig keywords passed through unchanged (e.g. ``use_vllm: true`` on a GPU box).
    """

    name: str = "demo"
    model: str = "tiny"
    env: str = "alfworld"
    env_kwargs: dict = field(default_factory=dict)
    data_dir: str | None = None
    train_split: str = "train"
    train_tasks: int = 0
    eval_panel: str | None = None
    eval_tasks: int = 24
    steps: int = 9
    num_generations: int = 4
    tasks_per_step: int = 4
    max_turns: int = 12
    max_new_tokens_per_turn: int = 32
    max_total_tokens: int = 2560
    invalid_action_penalty: float = 0.1
    learning_rate: float = 2e-4
    temperature: float = 1.0
    seed: int = 0
    teacher_at: str = "generation"
    action_selection: str = "auto"
    skillduet: dict = field(default_factory=lambda: copy.deepcopy(DEMO_SKILLDUET))
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    eval_before: bool = True
    eval_after: bool = True
    save_steps: int = 3
    output_dir: str | None = None
    device: str = "auto"
    precision: str = "auto"
    env_workers: int = 0
    threads: int = 0
    trl: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.warm_start, Mapping):
            self.warm_start = _warm_start_from_dict(dict(self.warm_start))
        self.validate()

    def validate(self) -> None:
        if not isinstance(self.name, str) or not self.name or "/" in self.name:
            _fail("name", self.name, "expected a non-empty name without '/'")
        if not isinstance(self.model, str) or not self.model:
            _fail("model", self.model, "expected a model folder or tiny / tiny:<size>")
        if self.model.startswith("tiny"):
            from skillduet_plugin.testing.tiny import SIZES

            size = tiny_size(self.model)
            if size not in SIZES:
                _fail("model", self.model, f"tiny sizes are {', '.join('tiny:' + s for s in SIZES)}")
        _choice("env", self.env, ENVS)
        for name in ("env_kwargs", "trl", "skillduet"):
            if not isinstance(getattr(self, name), Mapping):
                _fail(name, getattr(self, name), "expected a mapping")
        if self.data_dir is not None and not isinstance(self.data_dir, str):
            _fail("data_dir", self.data_dir, "expected a folder path or null")
        for name in ("train_tasks", "eval_tasks", "save_steps", "env_workers", "threads"):
            _int(name, getattr(self, name), 0)
        for name in ("steps", "num_generations", "tasks_per_step", "max_turns", "max_new_tokens_per_turn"):
            _int(name, getattr(self, name), 1)
        if self.num_generations < 2:
            _fail("num_generations", self.num_generations, "a GRPO group needs at least 2 rollouts per task")
        _int("max_total_tokens", self.max_total_tokens, 64)
        _num("invalid_action_penalty", self.invalid_action_penalty, 0)
        _num("learning_rate", self.learning_rate, 0, lo_open=True)
        _num("temperature", self.temperature, 0, lo_open=True)
        _int("seed", self.seed, 0)
        _choice("teacher_at", self.teacher_at, TEACHER_AT)
        _choice("action_selection", self.action_selection, ACTION_SELECTIONS)
        _choice("device", self.device, DEVICES)
        _choice("precision", self.precision, PRECISIONS)
        _bool("eval_before", self.eval_before)
        _bool("eval_after", self.eval_after)
        if self.eval_panel is not None and not isinstance(self.eval_panel, str):
            _fail("eval_panel", self.eval_panel, "expected a split name such as valid_unseen, valid_seen or test")
        self.warm_start.validate()
        self.method_config()  # raises ConfigError naming the skillduet.* field

    # ------------------------------------------------------------------ derived settings
    @property
    def method(self) -> str:
        return str(self.skillduet.get("method", "skillduet"))

    def method_config(self) -> SkillDuetConfig:
        """The SkillDuetConfig of this run: the ``method`` preset, then the other ``skillduet.*`` keys."""
        data = dict(self.skillduet)
        method = data.pop("method", "skillduet")
        if method not in METHODS:
            _fail("skillduet.method", method, f"allowed values are {', '.join(METHODS)}")
        if "seed" not in data:
            data["seed"] = self.seed
        try:
            return preset(method, **data)
        except ConfigError as exc:
            msg = str(exc)
            raise ConfigError(f"skillduet: {msg}" if msg.startswith("unknown") else f"skillduet.{msg}") from None
        except TypeError as exc:  # pragma: no cover - from_dict already names unknown keys
            raise ConfigError(f"skillduet: {exc}") from None

    @property
    def panel(self) -> str:
        return self.eval_panel or DEFAULT_PANEL[self.env]

    @property
    def is_tiny(self) -> bool:
        return self.model.startswith("tiny")

    @property
    def action_mode(self) -> str:
        """``generate`` or ``choose``: ``action_selection`` with ``auto`` resolved by the model."""
        if self.action_selection == "auto":
            return "choose" if self.is_tiny else "generate"
        return self.action_selection

    @property
    def warm_start_enabled(self) -> bool:
        enabled = self.warm_start.enabled
        return self.is_tiny if enabled == "auto" else bool(enabled)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def resolved_dict(self) -> dict[str, Any]:
        """Everything, with the method's settings expanded (what ``config.yaml`` of a run holds)."""
        data = self.to_dict()
        data["skillduet"] = {"method": self.method, **self.method_config().to_dict()}
        data["eval_panel"] = self.panel
        data["action_selection"] = self.action_mode
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "RunConfig":
        data = dict(data or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown setting(s) {', '.join(unknown)}: allowed keys are {', '.join(sorted(known))}")
        return cls(**data)


def tiny_size(model: str) -> str:
    """``tiny`` -> ``tiny``; ``tiny:small`` -> ``small``."""
    return model.split(":", 1)[1] if ":" in model else "tiny"


def _warm_start_from_dict(data: dict[str, Any]) -> WarmStartConfig:
    if "max_minutes" in data:
        raise ConfigError(f"warm_start.max_minutes={data['max_minutes']!r} was removed: a wall-clock cap made the "
                          f"warm-started model depend on the machine's load. Delete the key; warm_start.steps is "
                          f"the budget (a time estimate and a progress bar show how long it takes)")
    known = {f.name for f in fields(WarmStartConfig)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"unknown setting(s) {', '.join('warm_start.' + k for k in unknown)}: "
                          f"allowed keys are {', '.join(sorted(known))}")
    return WarmStartConfig(**data)


# ---------------------------------------------------------------------- YAML + overrides
def parse_value(text: str) -> Any:
    """A command-line value as YAML reads it: ``3`` -> 3, ``0.25`` -> 0.25, ``true`` -> True, ``null`` -> None,
    ``[a, b]`` -> list; anything else stays a string."""
    import yaml

    try:
        return yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        return text


def parse_overrides(items: list[str]) -> list[tuple[list[str], Any]]:
    """``["skillduet.keep_ratio=0.25", "env=webshop"]`` -> ``[(["skillduet", "keep_ratio"], 0.25), ...]``."""
    parsed = []
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"override {item!r} is invalid: expected key=value, e.g. steps=12 or "
                              f"skillduet.keep_ratio=0.25")
        path = key.split(".")
        if any(not part for part in path):
            raise ConfigError(f"override {item!r} is invalid: empty part in the dotted key {key!r}")
        parsed.append((path, parse_value(value)))
    return parsed


def _set_path(data: dict[str, Any], path: list[str], value: Any, where: str) -> None:
    node = data
    for i, part in enumerate(path[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"{where}: {'.'.join(path[:i + 1])} is not a section, it cannot hold "
                              f"{'.'.join(path[i + 1:])}")
        node = child
    node[path[-1]] = value


def _key_paths(data: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """The leaf key paths a (nested) mapping sets: ``{"a": {"b": 1}, "c": 2}`` -> ``{("a", "b"), ("c",)}``."""
    paths: set[tuple[str, ...]] = set()
    for key, value in data.items():
        if isinstance(value, Mapping):
            paths |= _key_paths(value, prefix + (str(key),))
        else:
            paths.add(prefix + (str(key),))
    return paths


def _merge(base: dict[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = copy.deepcopy(value)
    return base


def load_run_config(path: str | os.PathLike | None = None, overrides: list[str] | None = None,
                    output_dir: str | None = None) -> RunConfig:
    """Defaults (the CPU demo) <- the YAML file <- ``key=value`` overrides <- ``--output-dir``.

    Sections merge key by key, except a file's ``skillduet:`` section, which replaces the demo's method
    settings (it starts from the paper defaults of its ``method`` preset). Overrides always merge. Where the
    resulting env has its own demo defaults (``ENV_DEMO_DEFAULTS``: ``env=webshop`` alone is the WebShop demo),
    they replace the ALFWorld ones for every key that neither the file nor an override set.
    """
    import yaml

    data = RunConfig().to_dict()
    explicit: set[tuple[str, ...]] = set()
    if path is not None:
        file = Path(path)
        if not file.is_file():
            raise ConfigError(f"config file {str(path)!r} not found: pass a YAML file such as "
                              f"examples/cpu_demo.yaml, or no file for the CPU demo")
        loaded = yaml.safe_load(file.read_text()) or {}
        if not isinstance(loaded, Mapping):
            raise ConfigError(f"{path}: expected a mapping of settings at the top level, got "
                              f"{type(loaded).__name__}")
        explicit |= _key_paths(loaded)
        if isinstance(loaded.get("skillduet"), Mapping):
            # A file's method section starts from the paper defaults (its preset), not from the demo's
            # shortened schedule: a GPU recipe must not inherit consolidation every 3 steps by accident.
            data["skillduet"] = {}
        _merge(data, loaded)
    for key_path, value in parse_overrides(list(overrides or [])):
        if key_path[0] not in data:
            raise ConfigError(f"override {'.'.join(key_path)}={value!r}: unknown setting {key_path[0]!r}; "
                              f"allowed keys are {', '.join(sorted(data))}")
        _set_path(data, key_path, value, f"override {'.'.join(key_path)}")
        explicit.add(tuple(key_path))
    for key_path, value in ENV_DEMO_DEFAULTS.get(str(data.get("env")), {}).items():
        if not any(key_path[:len(e)] == e for e in explicit):
            _set_path(data, list(key_path), value, "env demo default")
    if output_dir is not None:
        data["output_dir"] = output_dir
    return RunConfig.from_dict(data)


def dump_yaml(data: Mapping[str, Any], path: str | os.PathLike) -> Path:
    import yaml

    out = Path(path)
    out.write_text(yaml.safe_dump(dict(data), sort_keys=False, default_flow_style=False))
    return out
