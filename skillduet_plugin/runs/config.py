"""The validated settings of one ``skillduet train`` run: YAML file + dotted ``key=value`` overrides.

The defaults ARE the CPU demo (tiny model, generated ALFWorld games, offline analyzer, consolidation every 3
steps so that the 9-step run consolidates three times). A config file only lists what differs. Every value
is checked when the config is built; a bad one raises :class:`ConfigError` naming the field and the fix.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from skillduet_plugin.config import METHOD_PRESETS, SkillDuetConfig, check_estimator, preset, read_yaml
from skillduet_plugin.core.episode import episode_field
from skillduet_plugin.core.names import ACTION_SELECTIONS
from skillduet_plugin.core.settings import (ConfigError, check, check_keys, check_types, field_docs, invalid,
                                            render_text, setting, validate_fields)
from skillduet_plugin.envs.registry import env_names, env_spec
from skillduet_plugin.runs.env_defaults import TINY_TASK_TYPES, run_defaults
from skillduet_plugin.runs.overrides import key_paths, merge, parse_overrides, set_path
from skillduet_plugin.warmstart import DESIGNS, EXPERTS, LOCAL_SKILL_TOKENS
from skillduet_plugin.warmstart.tiny_model import SIZES as TINY_SIZES

DEVICES = ("auto", "cpu", "cuda")
PRECISIONS = ("auto", "fp32", "bf16")
RUN_ACTION_SELECTIONS = ("auto",) + ACTION_SELECTIONS

# The demo's method settings: paper defaults except a short consolidation interval (3 steps, so the 9-step
# CPU run consolidates 3 times) and small skill budgets that fit the tiny model's context.
# The paper's settings (a consolidation every 10 steps), the teacher's Local skill cut to the budget the tiny model's
# warm start shows it (a clone reads a section as long as the ones it was cloned on; at 256 tokens the teacher of
# the reading study won fewer RL games than the student, at 96 more: docs/study.md).
DEMO_SKILLDUET: dict[str, Any] = {"method": "skillduet", "local_skill_token_budget": LOCAL_SKILL_TOKENS}


@dataclass
class WarmStartConfig:
    """Behaviour cloning on expert episodes before RL, so that a small model sometimes succeeds."""

    enabled: Any = setting("auto", "auto (on for tiny models, off for real checkpoints), true or false",
                           choices=("auto", True, False), fix="expected auto, true or false")
    design: str = setting("search", "what cloning teaches: search (expert episodes, skill_fraction of them with a "
                                    "skill section) or reading (per clone_split game: its Local skill, stand-in "
                                    "skills and none; ALFWorld)",
                          choices=DESIGNS)
    games: int = setting(72, "training games whose expert episodes are cloned (the first of the train split; with "
                         "design=reading they get the reading design's episodes too, 0: none)", kind="int", lo=0)
    clone_split: str = setting("clone", "design=reading: the split its games come from, never the RL games nor the "
                               "panel (generated on first use with generated games; with data_dir, a split of "
                               "that folder)", kind="str")
    clone_games: int = setting(500, "design=reading: games of clone_split cloned, round-robin over task types",
                               kind="int", lo=1)
    counterfactuals: int = setting(3, "design=reading: episodes per game whose Local skill names stand-in "
                                   "receptacles of the same room (where the expert then looks first)", kind="int",
                                   lo=0)
    global_episodes: int = setting(0, "design=reading: episodes per game with a Global of the task type (from "
                                   "other games' skills) and the expert's plain search", kind="int", lo=0)
    expert: str = setting("search", "the expert cloned: search (looks for the target like a player who does not "
                                    "know where it is; WebShop: reads the instruction only) or walkthrough (the "
                                    "stored plan, straight to the goal)", choices=EXPERTS)
    episodes_per_game: int = setting(2, "design=search: expert episodes per game (the searching expert visits "
                                     "receptacles in a different seeded order in each)", kind="int", lo=1)
    steps: int = setting(700, "optimizer steps, all of them (a budget in steps, not time: a busy machine makes the "
                              "same model); cached by a hash of its inputs; an interrupted warm start is not a "
                              "model: the next run continues it", kind="int", lo=0)
    checkpoint_steps: int = setting(100, "cloning state saved every N steps beside the cache (with the expert "
                                    "episodes once played), so a killed warm start continues there to the same "
                                    "weights (0: only the episodes)", kind="int", lo=0)
    max_turns: int | None = setting(12, "turn cap of the cloned expert episodes (null: the run's max_turns); above "
                                        "max_turns, RL gets a tighter turn budget than the expert had", kind="int",
                                    lo=1, optional=True, fix="expected a positive integer or null")
    batch_size: int = setting(4, "episodes per optimizer step", kind="int", lo=1)
    workers: int = setting(0, "processes computing episode gradients and reading-design episodes (0: auto from "
                              "cores and threads, 1 below 50 steps; 1: in-process); speed only: any count trains the "
                              "same model", kind="int", lo=0)
    learning_rate: float = setting(6e-3, "AdamW learning rate", lo=0, lo_open=True)
    skill_fraction: float = setting(0.5, "design=search: share of episodes whose first prompt carries a skill "
                                         "section from other expert episodes (half a Local '## Hindsight skill', "
                                         "half a '## Skills' Global)",
                                    lo=0, hi=1)
    skill_token_budget: int = setting(160, "token budget of those sections; the warm start's own setting, not the "
                                      "method's skillduet.skill_token_budget, so runs of different methods start "
                                      "from the same model", kind="int", lo=16)

    def validate(self) -> None:
        validate_fields(self, "warm_start.")
        if self.design == "search" and self.games < 1:
            invalid("warm_start.games", self.games, "design=search clones training games: expected at least 1")


@dataclass
class RunConfig:
    """One training run (defaults: the CPU demo); each field's help text is its documentation."""

    name: str = setting("demo", "run name (the run directory is runs/<timestamp>-<name> unless output_dir is set)")
    model: str = setting("tiny", "a local model folder, or tiny / tiny:<size> (built offline and cached)")
    env: str = setting("alfworld", "the environment (a registered name: alfworld, webshop, toy, ...)")
    env_kwargs: dict = setting(help="extra keywords of the environment factory", default_factory=dict,
                               kind="mapping")
    data_dir: str | None = setting(None, "the environment's data folder (null: generated ALFWorld games / the "
                                   "synthetic WebShop catalogue)", kind="path", optional=True,
                                   fix="expected a folder path or null")
    task_types: str | None = setting("auto", "comma-separated task types the training games, warm start and panels "
                                     "are drawn from (null: all); auto: "
                                     f"{TINY_TASK_TYPES['alfworld']} on ALFWorld with a tiny model, all otherwise",
                                     optional=True, fix="expected auto, comma-separated task types such as "
                                     "pick,look, or null for all")
    train_split: str = setting("train", "split trained on", kind="str")
    train_tasks: int = setting(15, "how many training tasks, taken round-robin over task types (0: all)",
                               kind="int", lo=0)
    eval_panel: str | None = setting(None, "the fixed evaluation split (null: the environment's default panel)",
                                     kind="str", optional=True,
                                     fix="expected a split name such as valid_unseen, valid_seen or test")
    eval_tasks: int = setting(20, "evaluation panel size, round-robin over task types (0: all)", kind="int", lo=0)
    steps: int = setting(10, "RL steps; tasks_per_step x num_generations episodes are played per step",
                         kind="int", lo=1)
    num_generations: int = setting(8, "group size G (rollouts per task)", kind="int", lo=2,
                                   fix="a GRPO group needs at least 2 rollouts per task")
    tasks_per_step: int = setting(5, "tasks per RL step", kind="int", lo=1)
    micro_batch: int = setting(0, "episodes per forward/backward pass of the update (0: the whole step's batch); "
                                  "must divide tasks_per_step x num_generations. The slices' gradients add up to one "
                                  "optimizer step: less memory, same update", kind="int", lo=0)
    # The episode settings (core.episode), from the CPU demo's short episodes.
    max_turns: int = episode_field("max_turns", 8, help="8 in the CPU demo")
    max_new_tokens_per_turn: int = episode_field("max_new_tokens_per_turn", 32, help="32 in the CPU demo")
    max_total_tokens: int = episode_field("max_total_tokens", 2560, help="2560 in the CPU demo", lo=64,
                                          optional=False, fix="expected an integer >= 64")
    invalid_action_penalty: float = episode_field("invalid_action_penalty")
    learning_rate: float = setting(3e-4, "RL learning rate", lo=0, lo_open=True)
    temperature: float = setting(1.0, "rollout sampling temperature", lo=0, lo_open=True)
    seed: int = setting(0, "seeds training, sampling and the method", kind="int", lo=0)
    teacher_at: str = episode_field("teacher_at")
    action_selection: str = episode_field("action_selection", "auto", help="auto: choose for tiny models, generate "
                                          "otherwise", choices=RUN_ACTION_SELECTIONS)
    skillduet: dict = setting(help="the method's settings (SkillDuetConfig keys) plus method = skillduet, "
                              "local_only, random or grpo (a preset the other keys override)",
                              default_factory=lambda: copy.deepcopy(DEMO_SKILLDUET), kind="mapping")
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig,
                                        metadata={"help": "behaviour-cloning warm start"})
    eval_before: bool = setting(True, "measure success on the panel before RL", kind="bool")
    eval_training_tasks: int = setting(15, "also measure this many RL training tasks (round-robin over task types; "
                                           "0: none) before and after RL, greedy, without a Global (and with it "
                                           "after RL, for a method with one); apart from the panel", kind="int", lo=0)
    eval_samples: int = setting(4, "sampled episodes per measured RL training task (rollout temperature, seeded "
                                   "by the run's seed), without a Global (and with it after RL, for a method with "
                                   "one), beside greedy success (0: greedy only)", kind="int", lo=0)
    eval_panel_samples: int = setting(0, "the same on the panel (0: greedy only)", kind="int", lo=0)
    eval_after: bool = setting(True, "measure success on the panel after RL", kind="bool")
    eval_teacher: bool = setting(True, "after RL, also play the measured training tasks with each game's first "
                                       "Local skill (the OPD teacher), before and after RL, to compare student and "
                                       "teacher (needs eval_training_tasks)", kind="bool")
    teacher_check_samples: int = setting(2, "each RL step, play every batch task that got a Local skill this many "
                                            "times with it and without it (seeded apart, never trained on); logged "
                                            "as teacher_check/* (0: off)", kind="int", lo=0)
    opd_update_share: bool = setting(True, "each RL step, measure how much of the update OPD makes (gradient norms "
                                     "of the policy loss and the OPD term over the step's micro-batches; two more "
                                     "backward passes): opd/update_share, plotted", kind="bool")
    save_steps: int = setting(5, "checkpoint every N steps (0: only the final model)", kind="int", lo=0)
    output_dir: str | None = setting(None, "run directory (default runs/<timestamp>-<name>)", kind="path",
                                     optional=True)
    device: str = setting("auto", "auto picks cuda when available, else cpu", choices=DEVICES)
    precision: str = setting("auto", "auto picks bf16 on cuda, else fp32", choices=PRECISIONS)
    env_workers: int = setting(0, "parallel environment worker processes (0: play in this process)",
                               kind="int", lo=0)
    threads: int = setting(0, "torch CPU threads (0: auto = one per two cores on CPU, torch's default on a GPU); "
                              "fixed per machine, so results do not depend on load",
                           kind="int", lo=0)
    trl: dict = setting(help="extra GRPOConfig keywords passed through unchanged (e.g. use_vllm: true on a GPU "
                        "box); keys are checked against GRPOConfig when the command starts",
                        default_factory=dict, kind="mapping")

    def __post_init__(self) -> None:
        if isinstance(self.warm_start, Mapping):
            if "max_minutes" in self.warm_start:
                raise ConfigError(f"warm_start.max_minutes={self.warm_start['max_minutes']!r} was removed: a "
                                  f"wall-clock cap made the warm-started model depend on the machine's load. Delete "
                                  f"the key; warm_start.steps is the budget (a time estimate and a progress bar show "
                                  f"how long it takes)")
            check_keys("warm_start", self.warm_start, WarmStartConfig)
            self.warm_start = WarmStartConfig(**dict(self.warm_start))
        self.validate()

    def validate(self) -> None:
        validate_fields(self)
        if "/" in self.name:
            invalid("name", self.name, "expected a name without '/'")
        if not self.model:
            invalid("model", self.model, "expected a model folder or tiny / tiny:<size>")
        if self.is_tiny and tiny_size(self.model) not in TINY_SIZES:
            invalid("model", self.model, f"tiny sizes are {', '.join('tiny:' + s for s in TINY_SIZES)}")
        batch = self.tasks_per_step * self.num_generations
        if self.micro_batch and batch % self.micro_batch:
            divisors = [d for d in range(1, batch + 1) if batch % d == 0]
            invalid("micro_batch", self.micro_batch, f"expected 0 or a divisor of tasks_per_step x num_generations = "
                    f"{batch}: {', '.join(map(str, divisors))}")
        check("env", self.env, choices=env_names())
        if self.task_types not in (None, "auto"):
            if not isinstance(self.task_types, str) or not self.task_type_list:
                invalid("task_types", self.task_types, "expected comma-separated task types, e.g. pick,look, or "
                        "null for all")
            known = tuple(env_spec(self.env).report.scope_order)
            if not known:
                invalid("task_types", self.task_types, f"env {self.env!r} has no task types to choose from: set "
                        f"task_types=null")
            unknown = [t for t in self.task_type_list if t not in known]
            if unknown:
                invalid("task_types", self.task_types, f"{', '.join(unknown)} unknown: {self.env} task types are "
                        f"{', '.join(known)} (or null for all)")
        self.warm_start.validate()
        factory = env_spec(self.env).make_expert
        takes_hint = factory is not None and "hint" in inspect.signature(factory).parameters
        if self.warm_start.design == "reading" and not takes_hint:
            invalid("warm_start.design", "reading", f"env {self.env!r} has no expert that acts on a skill: use "
                    f"warm_start.design=search")
        check_estimator(self.method_config(), self.action_mode, self.teacher_at)  # names the skillduet.* field

    def check_resources(self) -> None:
        """What only the machine can tell, checked when a command starts (not when a saved config is read):
        the model folder and the data folder exist, and every ``trl.*`` key is a GRPOConfig field with a value of
        that field's type."""
        if not self.is_tiny:
            check_model_folder(self.model)
        if self.data_dir is not None and not Path(self.data_dir).expanduser().is_dir():
            invalid("data_dir", self.data_dir, "no such folder: pass the benchmark data folder, or null for "
                    "generated data")
        if self.trl:
            from skillduet_plugin.integrations.trl.config import SkillDuetGRPOConfig  # lazy: imports torch

            check_keys("trl", self.trl, SkillDuetGRPOConfig)
            check_types("trl", self.trl, SkillDuetGRPOConfig)
        if self.device == "cuda":
            import torch  # lazy: torch

            if not torch.cuda.is_available():
                invalid("device", self.device, "no CUDA device is visible: use device=auto or cpu")

    # ------------------------------------------------------------------ derived settings
    @property
    def method(self) -> str:
        return str(self.skillduet.get("method", "skillduet"))

    def method_config(self) -> SkillDuetConfig:
        """The SkillDuetConfig of this run: the ``method`` preset, then the other ``skillduet.*`` keys."""
        data = dict(self.skillduet)
        method = data.pop("method", "skillduet")
        check("skillduet.method", method, choices=tuple(METHOD_PRESETS))
        if "seed" not in data:
            data["seed"] = self.seed
        try:
            return preset(method, **data)
        except ConfigError as exc:
            raise exc.under("skillduet") from None

    @property
    def panel(self) -> str:
        return self.eval_panel or env_spec(self.env).data.default_panel

    @property
    def task_type_list(self) -> list[str]:
        """``task_types`` as a list ([] for all), ``auto`` resolved by the env and the model."""
        if self.task_types == "auto":
            return TINY_TASK_TYPES[self.env].split(",") if self.is_tiny and self.env in TINY_TASK_TYPES else []
        return [t.strip() for t in (self.task_types or "").split(",") if t.strip()]

    @property
    def is_tiny(self) -> bool:
        return self.model.startswith("tiny")

    @property
    def action_mode(self) -> str:
        """``generate`` or ``choose``: ``action_selection`` with ``auto`` resolved by the model."""
        if self.action_selection == "auto":
            return "choose" if self.is_tiny else "generate"
        return self.action_selection

    def samples_for(self, split: str | None) -> int:
        """Sampled episodes per task of an evaluation: ``eval_samples`` for the RL training tasks (measured with
        their ``split``), ``eval_panel_samples`` for the panel (``split`` None)."""
        return self.eval_panel_samples if split is None else self.eval_samples

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
        check_keys("", data, cls)
        return cls(**data)


def check_model_folder(model: str) -> Path:
    """The resolved folder of a real model (not ``tiny``); one ConfigError line when there is none."""
    path = Path(model).expanduser()
    if not (path / "config.json").is_file():
        invalid("model", model, "no model folder with a config.json there: pass a local model folder (e.g. from "
                "`skillduet models smollm2 DIR`) or tiny / tiny:<size>")
    return path.resolve()


def tiny_size(model: str) -> str:
    """``tiny`` -> ``tiny``; ``tiny:small`` -> ``small``."""
    return model.split(":", 1)[1] if ":" in model else "tiny"


def load_run_config(path: str | os.PathLike | None = None, overrides: list[str] | None = None,
                    output_dir: str | None = None, *, check_machine: bool = True) -> RunConfig:
    """Defaults (the CPU demo) <- the YAML file <- ``key=value`` overrides <- ``--output-dir``.

    Sections merge key by key, except a file's ``skillduet:`` section, which replaces the demo's method
    settings (it starts from the paper defaults of its ``method`` preset). Overrides always merge. Where the
    resulting env has run defaults (``runs.env_defaults``: ``env=webshop`` alone is the WebShop demo),
    they replace the ALFWorld ones for every key that neither the file nor an override set. With
    ``check_machine`` the model and data folders and the ``trl.*`` keys are checked too
    (:meth:`RunConfig.check_resources`), so that every mistake is reported before any work starts.
    """
    data = RunConfig().to_dict()
    explicit: set[tuple[str, ...]] = set()
    if path is not None:
        loaded = read_yaml(path, "run settings")
        explicit |= key_paths(loaded)
        if isinstance(loaded.get("skillduet"), Mapping):
            # A file's method section starts from the paper defaults (its preset), not from the demo's
            # shortened schedule: a GPU recipe must not inherit consolidation every 3 steps by accident.
            data["skillduet"] = {}
        merge(data, loaded)
    for key_path, value in parse_overrides(list(overrides or [])):
        check_keys("", {key_path[0]: value}, data)
        set_path(data, key_path, value, f"override {'.'.join(key_path)}")
        explicit.add(tuple(key_path))
    env = data.get("env")
    if env in env_names():
        for dotted, value in run_defaults(env).items():
            key_path = tuple(dotted.split("."))
            if not any(key_path[:len(e)] == e for e in explicit):
                set_path(data, list(key_path), value, "env run default")
    if output_dir is not None:
        data["output_dir"] = output_dir
    config = RunConfig.from_dict(data)
    if check_machine:
        config.check_resources()
    return config


def saved_run_config(path: str | os.PathLike) -> RunConfig:
    """The settings a finished run wrote to its ``config.yaml`` (``path``: that file), as given then: no defaults
    of today merged in, ``output_dir`` cleared so that reading it back never claims the run's folder."""
    data = yaml.safe_load(Path(path).read_text()) or {}
    data["output_dir"] = None
    return RunConfig.from_dict(data)


def method_rows() -> list[tuple[str, str, str]]:
    """The ``skillduet.method`` row of the settings docs (a key of the run config, not of SkillDuetConfig)."""
    return [("skillduet.method", DEMO_SKILLDUET["method"],
             f"the preset the other skillduet.* keys override: {', '.join(METHOD_PRESETS)}")]


def settings_help() -> str:
    """Every run setting with its default and help (the epilog of ``skillduet train --help``)."""

    return render_text(field_docs(RunConfig) + method_rows() + field_docs(SkillDuetConfig, "skillduet."))


def dump_yaml(data: Mapping[str, Any], path: str | os.PathLike) -> Path:

    out = Path(path)
    out.write_text(yaml.safe_dump(dict(data), sort_keys=False, default_flow_style=False))
    return out
