"""``skillduet study``: the paper's comparisons at equal budget, run by ``skillduet train``'s own pieces.

One base run config (a YAML file + ``key=value`` overrides, exactly as ``skillduet train`` reads them) is
warm-started ONCE; every arm (a method overlay: GRPO, Local-only OPD, SkillDuet with Random / Strength /
Utility / Contrast selection, keep ratios) then trains from that same model, with the same steps, tasks,
rollouts and panel, for each seed, through ``runs.trl_runner.run_training`` (no second training loop). The
panel is measured once before RL (the shared model, greedy: the same for every arm and seed), after RL by each
run, and, for arms that build a Global, also with the length-matched neutral text (Table 3 with the run's own
"none" and "learned Global" rows).

Resumable per run: a run whose ``summary.json`` (and neutral evaluation) exists is skipped; an interrupted one
continues from its last complete checkpoint (``run_training(resume=...)``, as ``skillduet train --resume``), or,
when it stopped before its first checkpoint, its folder is removed and it restarts from scratch. Layout of a study
directory::

    study.json          the spec (base config source, overrides, arms, seeds) and the resolved base config
    shared_model/       the warm-started model every run starts from (written atomically)
    before.json         the panel before RL (before_train.json: the RL training tasks, when measured)
    runs/<arm>-s<seed>/ one ``skillduet train`` run directory each (+ eval/neutral.json)
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import sys
import time
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from tqdm.auto import tqdm

from skillduet_plugin.config import METHOD_PRESETS, ConfigError, SkillDuetConfig
from skillduet_plugin.core.artefacts import replace_file
from skillduet_plugin.core.selectors import SELECTORS
from skillduet_plugin.runs.config import RunConfig, load_run_config
from skillduet_plugin.runs.evaluate import evaluate_panel
from skillduet_plugin.runs.overrides import parse_value
from skillduet_plugin.runs.rundir import resolve_model, write_json


def _arm(method: str, label: str, **changes: Any) -> tuple[str, dict[str, Any]]:
    return label, {"method": method, **METHOD_PRESETS[method].settings, **changes}


def selector_arms() -> list[str]:
    """The selectors compared as arms of their own (``skillduet`` with that selector): every registered selector
    that ranks by its own score (``core.selectors``; ``random`` is a preset of its own)."""
    return [name for name in SELECTORS.names() if not SELECTORS.get(name).shuffle]


def arms() -> dict[str, tuple[str, dict[str, Any]]]:
    """The named arms: name -> (label, skillduet.* overlay), from the method presets (config.METHOD_PRESETS) and
    the selector registry. Each overlay spells out its preset's switches, so a base config that sets one of them
    explicitly cannot turn an ablation back into the full method."""
    return {**{name: _arm(name, METHOD_PRESETS[name].label) for name in ("grpo", "local_only", "random")},
            **{selector: _arm("skillduet", f"SkillDuet ({selector.title()})", selector=selector)
               for selector in selector_arms()}}


DEFAULT_ARMS = ("grpo", "local_only", "random", "strength")
# `--quick`: a first look, not a result (the warm start is the demo's, so a cached one is reused). 3 steps = one
# consolidation (the demo's interval), so the SkillDuet arms have a Global for Table 3. Measured: 16.4 CPU-minutes
# in all with an uncached warm start (700 cloning steps), one torch thread; 57 min wall at load 9-17 on 2 cores.
QUICK_OVERRIDES = ("steps=3", "eval_tasks=12", "save_steps=3")
QUICK_SEEDS = (0, 1)
STUDY_FILE = "study.json"
SHARED_MODEL = "shared_model"
BEFORE_FILE = "before.json"
BEFORE_TRAIN_FILE = "before_train.json"
NEUTRAL_FILE = "neutral.json"


def arm_overlay(name: str) -> tuple[str, dict[str, Any]]:
    """``(label, skillduet overlay)`` of an arm: a built-in name, or ``strength_keep<ratio>`` / ``<selector>_keep
    <ratio>`` (e.g. ``strength_keep0.25``) for a keep-ratio ablation, either followed by ``+key=value`` settings
    of the method (``local_only+opd_coef=0``, ``local_only+opd_estimator=choices+opd_coef=1``)."""
    name, *extra = name.split("+")
    label, overlay = _named_arm(name)
    if not extra:
        return label, overlay
    changes: dict[str, Any] = {}
    for item in extra:
        key, sep, value = item.partition("=")
        if not sep or not key or key in ("method",) or key not in SkillDuetConfig.__dataclass_fields__:
            raise ConfigError(f"arm {'+'.join([name, *extra])!r} is invalid: {item!r} must be key=value with a "
                              f"skillduet setting as key, e.g. {name}+opd_coef=0")
        changes[key] = parse_value(value)
    words = ", ".join(f"{k}={v}" for k, v in changes.items())
    return f"{label} ({words})", {**overlay, **changes}


def _named_arm(name: str) -> tuple[str, dict[str, Any]]:
    """A built-in arm or a keep-ratio ablation (:func:`arm_overlay` without ``+key=value``)."""
    named = arms()
    base, sep, ratio = name.partition("_keep")
    if base in named and sep:
        try:
            value = float(ratio)
        except ValueError:
            value = -1.0
        if not 0 < value <= 1 or base in ("grpo", "local_only"):
            raise ConfigError(f"arm {name!r} is invalid: expected <selector>_keep<ratio> with a ratio in (0, 1], "
                              f"e.g. strength_keep0.25")
        label, overlay = named[base]
        return f"{label} keep {value:g}", {**overlay, "keep_ratio": value}
    if name not in named:
        raise ConfigError(f"arm {name!r} is invalid: allowed values are {', '.join(named)} or "
                          f"<selector>_keep<ratio> (e.g. strength_keep0.25)")
    return named[name]


@dataclass
class StudySpec:
    """What a study runs: the base config (file + overrides, as for ``skillduet train``), arms and seeds."""

    config: str | None = None
    overrides: list[str] = field(default_factory=list)
    arms: list[str] = field(default_factory=lambda: list(DEFAULT_ARMS))
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    quick: bool = False

    def validate(self) -> None:
        if not self.arms:
            raise ConfigError("--methods is empty: name at least one arm, e.g. grpo,strength")
        if len(set(self.arms)) != len(self.arms):
            raise ConfigError(f"--methods={','.join(self.arms)!r} names an arm twice")
        for arm in self.arms:
            arm_overlay(arm)
        if not self.seeds or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in self.seeds):
            raise ConfigError(f"--seeds={self.seeds!r} is invalid: expected non-negative integers, e.g. 0,1,2")
        if len(set(self.seeds)) != len(self.seeds):
            raise ConfigError(f"--seeds={self.seeds!r} names a seed twice")

    def base_overrides(self) -> list[str]:
        return (list(QUICK_OVERRIDES) if self.quick else []) + list(self.overrides)

    def base_config(self) -> RunConfig:
        """The resolved base config (the warm start's; arms only change ``skillduet.*``, seed and paths)."""
        return load_run_config(self.config, self.base_overrides())


@dataclass(frozen=True)
class PlannedRun:
    arm: str
    seed: int

    @property
    def name(self) -> str:
        return f"{self.arm}-s{self.seed}"


def plan(spec: StudySpec) -> list[PlannedRun]:
    """Seed-major order: every arm of seed 0 first, so a stopped study already holds comparable runs."""
    return [PlannedRun(arm, seed) for seed in spec.seeds for arm in spec.arms]


# ---------------------------------------------------------------------- state on disk
def _atomic_json(path: Path, data: Any) -> None:
    replace_file(path, lambda tmp: write_json(tmp, data))


_ABSENT = object()


def _differences(old: dict[str, Any], new: dict[str, Any], default: Any, prefix: str = "") -> list[str]:
    """The settings (dotted names) in which a study's stored base config ``old`` and the base config ``new`` differ.
    A setting the stored file lacks (added to the product after the study began) counts as equal when ``new``
    holds its default (``default``: the default config's resolved dict), so a product update does not lock a
    study out of its own resume."""
    default = default if isinstance(default, dict) else {}
    out = []
    for key in sorted(set(old) | set(new)):
        if not prefix and key in ("output_dir", "name"):
            continue
        a, b = old.get(key, _ABSENT), new.get(key, _ABSENT)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _differences(a, b, default.get(key), f"{prefix}{key}.")
        elif a is _ABSENT and key in default and b == default[key]:
            continue
        elif a != b:
            out.append(prefix + key)
    return out


def open_study(root: Path, spec: StudySpec, base: RunConfig) -> None:
    """Create ``study.json`` or check that an existing study was started with the same base config (arms and
    seeds may change between invocations: a study can be extended)."""
    root.mkdir(parents=True, exist_ok=True)
    file = root / STUDY_FILE
    resolved = base.resolved_dict()
    if file.is_file():
        stored = json.loads(file.read_text())
        default = json.loads(json.dumps(RunConfig().resolved_dict()))
        diff = _differences(stored.get("base", {}), json.loads(json.dumps(resolved)), default)
        if diff:
            raise ConfigError(f"study directory {str(root)!r} was started with other base settings ("
                              f"{', '.join(diff)} differ): rerun it with its own config and overrides "
                              f"(`skillduet study --resume {root}`), or choose a new --output-dir")
    _atomic_json(file, {"spec": asdict(spec), "base": resolved, "format": 1})


def load_spec(root: Path) -> StudySpec:
    file = Path(root) / STUDY_FILE
    if not file.is_file():
        raise ConfigError(f"--resume {str(root)!r} is invalid: it holds no {STUDY_FILE}; pass a study directory")
    return StudySpec(**json.loads(file.read_text())["spec"])


def run_dir(root: Path, run: PlannedRun) -> Path:
    return Path(root) / "runs" / run.name


def is_complete(path: Path, needs_neutral: bool) -> bool:
    return (path / "summary.json").is_file() and (not needs_neutral or (path / "eval" / NEUTRAL_FILE).is_file())


# ---------------------------------------------------------------------- the phases
def shared_model_path(root: Path, base: RunConfig) -> Path:
    """Where the shared model is (or will be): a real checkpoint without a warm start is used in place."""
    if not base.warm_start_enabled and not base.is_tiny:

        return resolve_model(base.model, seed=base.seed, env=base.env)
    return root / SHARED_MODEL


def shared_model(root: Path, base: RunConfig, say: Callable[[str], None]) -> Path:
    """The one model every run starts from: the base config's warm start (or its model when the warm start is
    off), copied into the study so a cache clean-up cannot change a resumed study."""

    from skillduet_plugin.runs import trl_runner  # lazy: imports torch

    target = shared_model_path(root, base)
    if (target / "config.json").is_file():
        return target
    trl_runner.set_threads(base)
    source = resolve_model(base.model, seed=base.seed, env=base.env)
    if base.warm_start_enabled:
        source, _ = trl_runner._warm_start(base, source, say)
    tmp = root / f".{SHARED_MODEL}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(source, tmp)
    os.replace(tmp, target)
    say(f"shared model: {target} (from {source})")
    return target


def _threads(base: RunConfig) -> int:
    """The base config's torch thread count, made explicit: the arms run a model folder, not ``tiny``, and
    must use the same count as the base (and the warm start)."""
    from skillduet_plugin.runs.trl_runner import torch_threads  # lazy: imports torch

    return int(torch_threads(base))


def run_config(spec: StudySpec, base: RunConfig, model: Path, run: PlannedRun, out: Path) -> RunConfig:
    """The config of one run: the base config + the arm's ``skillduet.*`` overlay, its seed, the shared model
    (no warm start of its own), the base's resolved action selection, threads and task types (``auto`` resolves
    by the model, and the arms' model is a folder, not ``tiny``), no before-RL panel."""
    _, overlay = arm_overlay(run.arm)
    arm = [f"skillduet.{k}={json.dumps(v) if isinstance(v, (bool, float, int)) else v}" for k, v in overlay.items()]
    # the model path is quoted so that YAML never reads it as something else
    fixed = [f"model={json.dumps(str(model))}", "warm_start.enabled=false", f"action_selection={base.action_mode}",
             f"threads={_threads(base)}", f"task_types={','.join(base.task_type_list) or 'null'}",
             "eval_before=false", f"seed={run.seed}", f"name={run.name}"]
    # The base config was checked against the machine; the arm's model is the study's own shared model, which
    # does not exist before the warm start (arms are checked before it), so the folder check is skipped here.
    check = {"check_machine": False}
    return load_run_config(spec.config, spec.base_overrides() + arm + fixed, output_dir=str(out), **check)


def measure_before(root: Path, config: RunConfig, model: Path, say: Callable[[str], None]) -> dict[str, Any]:
    """The panel before RL, once for the study (greedy on the shared model: every arm and seed would get the
    same numbers); with ``eval_training_tasks`` also the first of the RL training tasks (``before_train.json``)."""
    # lazy: imports torch
    from skillduet_plugin.runs.trl_runner import load_model, panel, set_threads, train_tasks, training_eval_tasks

    file, train_file = root / BEFORE_FILE, root / BEFORE_TRAIN_FILE
    wanted = [(file, None)] + ([(train_file, config.train_split)] if config.eval_training_tasks else [])
    if all(f.is_file() for f, _ in wanted):
        return json.loads(file.read_text())
    set_threads(config)
    net, tokenizer = load_model(model, config)
    for target, split in wanted:
        if target.is_file():
            continue
        tasks = panel(config) if split is None else training_eval_tasks(config, train_tasks(config))
        results = evaluate_panel(net, tokenizer, config, tasks, None, conditions=("none",), log=say, split=split,
                                 samples=config.samples_for(split))
        results["panel"] = split or config.panel
        _atomic_json(target, results)
    return json.loads(file.read_text())


def measure_neutral(path: Path, config: RunConfig, say: Callable[[str], None]) -> None:
    """Table 3's middle row for a finished run: its final model with the length-matched neutral text."""
    from skillduet_plugin.runs.trl_runner import load_model, panel, set_threads  # lazy: imports torch

    set_threads(config)
    net, tokenizer = load_model(path / "final_model", config)
    results = evaluate_panel(net, tokenizer, config, panel(config), path / "skill_bank.sqlite",
                             conditions=("neutral",), log=say)
    results["panel"] = config.panel
    _atomic_json(path / "eval" / NEUTRAL_FILE, results)


def _train(config: RunConfig, path: Path, say: Callable[[str], None],
           emit: Callable[[str], None] | None = None) -> str:
    """Train one run; an interrupted one continues from its last complete checkpoint (``skillduet train
    --resume``), or starts again from scratch when it stopped before its first. Returns how it started:
    fresh, resumed or restarted."""
    from skillduet_plugin.runs import trl_runner  # lazy: imports torch

    if not path.exists():
        trl_runner.run_training(config, log=emit or say)
        return "fresh"
    try:
        trl_runner.resume_point(path)
    except ConfigError as err:  # no complete checkpoint yet
        say(f"{path.name}: cannot resume ({err}); restarting it")
        shutil.rmtree(path)
        trl_runner.run_training(config, log=emit or say)
        return "restarted"
    say(f"{path.name}: resuming from its last checkpoint")
    trl_runner.run_training(config, log=emit or say, resume=path)
    return "resumed"


def _complete_run(config: RunConfig, path: Path, run: PlannedRun, needs_neutral: bool,
                  say: Callable[[str], None], emit: Callable[[str], None] | None = None) -> None:
    """Train one run (fresh, resumed or restarted) and add its neutral evaluation when its arm has a Global."""
    if not (path / "summary.json").is_file():
        t0 = time.time()
        how = _train(config, path, say, emit)
        _atomic_json(path / "study_run.json", {"arm": run.arm, "seed": run.seed, "start": how,
                                               "wall_s_this_attempt": round(time.time() - t0, 1)})
    if needs_neutral and not (path / "eval" / NEUTRAL_FILE).is_file():
        measure_neutral(path, config, say)


def _worker(config: RunConfig, path: Path, run: PlannedRun, needs_neutral: bool) -> str:
    """One run in a worker process; its lines go to stderr prefixed with the run's name."""

    def emit(line: str) -> None:
        print(f"[{run.name}] {line}", file=sys.stderr, flush=True)

    def say(msg: str) -> None:
        emit(f"[{time.strftime('%H:%M:%S')}] {msg}")

    _complete_run(config, path, run, needs_neutral, say, emit)
    return run.name


def _pool_kwargs() -> dict[str, Any]:
    """Extra ``ProcessPoolExecutor`` arguments: on Python >= 3.11 each worker process runs one run and exits, so
    every run starts in a fresh process. ``max_tasks_per_child`` does not exist on 3.10: there a worker process
    runs several runs in turn (each from its own config and seed, but process-wide state such as imported
    modules and torch's caches carries over from one run to the next in that process)."""
    return {"max_tasks_per_child": 1} if sys.version_info >= (3, 11) else {}


def _run_parallel(todo: list[PlannedRun], configs: dict[PlannedRun, RunConfig], root: Path,
                  needs: dict[PlannedRun, bool], jobs: int, bar: Any, say: Callable[[str], None]) -> None:
    """Runs in ``jobs`` worker processes (spawned: no torch state is shared); the first failure stops the
    study after the runs in flight end (each is resumable)."""

    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                             **_pool_kwargs()) as pool:
        futures = {pool.submit(_worker, configs[r], run_dir(root, r), r, needs[r]): r for r in todo}
        pending = set(futures)
        while pending:
            finished, pending = wait(pending, return_when=FIRST_EXCEPTION)
            for f in finished:
                f.result()  # re-raises a worker's error here
                say(f"{futures[f].name}: done")
                bar.update(1)


def run_study(root: str | os.PathLike, spec: StudySpec, *, log: Callable[[str], None] | None = None,
              progress: bool = True, jobs: int = 1) -> Path:
    """Run (or continue) a study in ``root``; returns its path. The report is written by the caller
    (``reporting.study_report``). ``jobs`` > 1 trains that many runs at once, each in its own process (each
    with the base config's thread count): every run is still the same computation as when run alone."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ConfigError(f"--jobs={jobs!r} is invalid: expected an integer >= 1 (e.g. 2 on a 2-core machine "
                          "with one thread per run)")

    spec.validate()
    root = Path(root).expanduser().resolve()
    base = spec.base_config()
    open_study(root, spec, base)
    bar = None

    def emit(line: str) -> None:  # run_training's lines arrive time-stamped already
        if log is not None:
            log(line)
        elif bar is not None:
            bar.write(line)
        else:
            print(line, flush=True)

    def say(msg: str) -> None:
        emit(f"[{time.strftime('%H:%M:%S')}] {msg}")

    runs = plan(spec)
    model = shared_model_path(root, base)
    configs = {r: run_config(spec, base, model, r, run_dir(root, r)) for r in runs}  # all checked before any work
    shared_model(root, base, say)
    measure_before(root, next(iter(configs.values())), model, say)
    needs = {r: configs[r].method_config().use_global for r in runs}
    done = sum(is_complete(run_dir(root, r), needs[r]) for r in runs)
    todo = [r for r in runs if not is_complete(run_dir(root, r), needs[r])]
    bar = tqdm(total=len(runs), initial=done, desc="study", unit="run", disable=not progress, dynamic_ncols=True)
    try:
        if jobs <= 1:
            for r in todo:
                bar.set_postfix_str(r.name)
                _complete_run(configs[r], run_dir(root, r), r, needs[r], say, emit)
                bar.update(1)
        else:
            _run_parallel(todo, configs, root, needs, jobs, bar, say)
    finally:
        bar.close()
    return root
