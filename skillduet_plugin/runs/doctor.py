"""``skillduet doctor``: what a long job needs, checked in seconds before it starts, each failure with its fix.

The checks read the same configuration the job will: a ``skillduet train`` run config with its
``key=value`` overrides, or (``--verl``) the verl config ``python -m skillduet_plugin.main_ppo`` composes and
validates from the same Hydra overrides (its ``DRY_RUN=1`` output). Each :class:`Check` is ok or not, says what
it found, and how to fix a failure:

- ``versions``: trl / verl / vLLM installed against the package's pins (those the job uses must be installed);
- ``verl plugin`` (verl jobs, or whenever verl is installed): in a fresh Python process, ``import verl`` loads the
  ``verl.plugins`` entry point and SkillDuet's trainer, agent loop and distillation loss register (verl itself
  logs a failing entry point at debug level only, and the job then runs as plain GRPO);
- ``environment``: the environment builds from its data folder and resets its first task;
- ``analyzer``: the configured analyzer answers one real extraction request (a one-turn episode of that
  environment) whose reply parses into a Local skill, timed; one attempt, no retries;
- ``tracker``: the configured trackers can start (packages importable, W&B credentials or offline mode);
- ``bank folder``: the skill bank's folder can be created and written (a file and a SQLite database).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from skillduet_plugin.config import ConfigError, SkillDuetConfig
from skillduet_plugin.envs import make
from skillduet_plugin.integrations.verl.settings import settings_from_trainer_config
from skillduet_plugin.llm.base import make_backend
from skillduet_plugin.runs.config import load_run_config
from skillduet_plugin.skills.extract import extract_local
from skillduet_plugin.skills.types import Trajectory

#: the frameworks whose installed version is held against the package's pins
PINNED = ("trl", "verl", "vllm")
DIST = "skillduet"


@dataclass
class Check:
    """One line of the report."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    seconds: float | None = None

    def line(self) -> str:
        took = f" ({self.seconds:.2f} s)" if self.seconds is not None else ""
        text = f"[{'ok' if self.ok else 'FAIL'}] {self.name}: {self.detail}{took}"
        return text if self.ok or not self.fix else f"{text}\n       fix: {self.fix}"


@dataclass
class Target:
    """What the job will use, read from its config."""

    kind: str  # "trl" (skillduet train) or "verl"
    method: SkillDuetConfig
    env: str
    data_dir: str | None
    env_kwargs: dict
    split: str
    bank_dir: str
    trackers: list[str]
    needs: tuple[str, ...]  # frameworks the job imports
    data_files: tuple[str, ...] = ()


def run_target(config_path: str | None, overrides: Sequence[str]) -> Target:
    """A ``skillduet train`` run config (the file plus ``key=value`` overrides, as ``train`` reads them)."""

    config = load_run_config(config_path, list(overrides))
    report_to = config.trl.get("report_to", "none")
    trackers = [report_to] if isinstance(report_to, str) else list(report_to or [])
    out = config.output_dir or "runs"
    return Target("trl", config.method_config(), config.env, config.data_dir, dict(config.env_kwargs),
                  config.train_split, out, [t for t in trackers if t not in ("none", "")], ("trl",))


def verl_target(overrides: Sequence[str], timeout: float = 600.0) -> Target:
    """The verl config ``python -m skillduet_plugin.main_ppo OVERRIDES`` composes and validates (verl's own checks
    included), read from that command's ``DRY_RUN=1`` output in a child process."""
    import yaml  # lazy: yaml

    from omegaconf import OmegaConf  # lazy: omegaconf

    proc = subprocess.run([sys.executable, "-m", "skillduet_plugin.main_ppo", *overrides], capture_output=True,
                          text=True, env=dict(os.environ, DRY_RUN="1"), timeout=timeout)
    text = proc.stdout.split("# DRY_RUN:")[0]
    if proc.returncode != 0 or "# DRY_RUN:" not in proc.stdout:
        lines = [x for x in proc.stderr.splitlines() if x.strip() and "WARNING" not in x and "HYDRA_FULL" not in x]
        raise ConfigError(f"the verl config does not compose: {' | '.join(lines[-3:]) or proc.returncode}")
    config = OmegaConf.create(yaml.safe_load(text))
    settings = settings_from_trainer_config(config)
    env = settings.env
    bank = os.path.dirname(settings.resolved_bank_path(config.trainer.default_local_dir))
    files = config.data.get("train_files", None)
    files = [files] if isinstance(files, str) else list(files or [])
    rollout = OmegaConf.select(config, "actor_rollout_ref.rollout.name", default=None, throw_on_missing=False)
    needs = ("verl", "vllm") if rollout == "vllm" else ("verl",)
    loggers = config.trainer.get("logger", None) or []
    loggers = [loggers] if isinstance(loggers, str) else list(loggers)
    return Target("verl", settings.method, env.name, env.data_dir, dict(env.env_kwargs), "train", bank,
                  [str(x) for x in loggers], needs, tuple(str(f) for f in files))


def _pins() -> dict[str, str]:
    from packaging.requirements import Requirement  # lazy: packaging

    pins: dict[str, str] = {}
    for line in importlib.metadata.requires(DIST) or []:
        req = Requirement(line)
        if req.name in PINNED and str(req.specifier):
            pins[req.name] = str(req.specifier)
    return pins


def check_versions(target: Target) -> Check:
    from packaging.specifiers import SpecifierSet  # lazy: packaging
    from packaging.version import Version  # lazy: packaging

    pins, found, bad, missing = _pins(), [], [], []
    for name in PINNED:
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            if name in target.needs:
                missing.append(name)
            continue
        spec = pins.get(name)
        found.append(f"{name} {version}" + (f" (pin {spec})" if spec else ""))
        if spec and not SpecifierSet(spec).contains(Version(version), prereleases=True):
            bad.append(f"{name} {version} outside {spec}")
    if missing or bad:
        what = "; ".join([f"{m} is not installed (the job needs it)" for m in missing] + bad)
        return Check("versions", False, what, "pip install -e '.[trl,verl]' (vLLM: '.[gpu]') to get the pinned "
                     "releases, or use the environment the job was tested in")
    return Check("versions", True, ", ".join(found) or "none of trl / verl / vLLM installed")


PLUGIN_PROBE = r"""
import importlib.metadata, json, logging, sys, traceback
out = {"declared": False, "loaded_by_verl": False, "error": None, "status": {}}
try:
    import verl  # loads the verl.plugins entry points, as in every verl process
except Exception:
    out["error"] = "import verl failed:\n" + traceback.format_exc()
    print("DOCTOR" + json.dumps(out)); sys.exit(0)
eps = [ep for ep in importlib.metadata.entry_points(group="verl.plugins") if ep.name == "skillduet"]
out["declared"] = bool(eps)
out["loaded_by_verl"] = "skillduet_plugin.integrations.verl.plugin" in sys.modules
try:
    if eps and not out["loaded_by_verl"]:
        eps[0].load()  # what verl swallowed: load it again and show the traceback
    from skillduet_plugin.integrations.verl.plugin import ensure_registered, registration_status
    ensure_registered()
    out["status"] = registration_status()
except Exception:
    out["error"] = traceback.format_exc()
print("DOCTOR" + json.dumps(out))
"""


def check_plugin(env: dict[str, str] | None = None, timeout: float = 300.0) -> Check:
    """The ``verl.plugins`` entry point in a fresh process (``env``: that process's environment)."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", PLUGIN_PROBE], capture_output=True, text=True,
                          env=dict(os.environ if env is None else env), timeout=timeout)
    took = time.perf_counter() - t0
    line = next((x for x in proc.stdout.splitlines() if x.startswith("DOCTOR")), None)
    if line is None:
        return Check("verl plugin", False, f"the probe process exited {proc.returncode}: "
                     f"{proc.stderr.strip()[-800:]}", "run `python -c 'import verl'` and fix what it prints", took)
    out = json.loads(line[len("DOCTOR"):])
    policy = (env or os.environ).get("VERL_USE_EXTERNAL_PLUGINS", "auto").strip().lower()
    if not out["declared"]:
        return Check("verl plugin", False, "no 'skillduet' entry point in the verl.plugins group of this Python",
                     "install the package into the Python that runs verl: pip install -e '.[verl]'", took)
    if out["error"]:
        return Check("verl plugin", False, "importing the plugin fails (verl logs this at debug level only and "
                     "the job would run as plain GRPO):\n" + out["error"].rstrip(),
                     "fix the import error above in the Python that runs verl", took)
    if not out["loaded_by_verl"] and policy not in ("auto", "skillduet") and "skillduet" not in policy.split(","):
        return Check("verl plugin", False, f"VERL_USE_EXTERNAL_PLUGINS={policy} keeps verl from loading it",
                     "unset VERL_USE_EXTERNAL_PLUGINS or add skillduet to it", took)
    missing = [name for name, ok in out["status"].items() if not ok]
    if missing:
        return Check("verl plugin", False, f"not registered with verl: {', '.join(missing)}",
                     "reinstall skillduet next to verl 0.9.x (pip install -e '.[verl]')", took)
    return Check("verl plugin", True, "import verl registers " + ", ".join(out["status"]), seconds=took)


def _first_reset(target: Target) -> tuple[Any, str, Any, dict]:

    env = make(target.env, data_dir=target.data_dir, split=target.split, **target.env_kwargs)
    if not env.tasks:
        raise ConfigError(f"env={target.env!r} has no tasks in split {target.split!r}")
    task_id = env.tasks[0]
    obs, info = env.reset(task_id)
    return env, task_id, obs, info


def check_environment(target: Target) -> tuple[Check, Any]:
    """The environment builds and resets its first task (and verl's ``data.train_files`` exist); returns the check
    and a one-turn episode for the analyzer check (None when the environment failed)."""
    t0 = time.perf_counter()
    try:
        env, task_id, obs, info = _first_reset(target)
        action = (info.get("admissible_actions") or ["look"])[0]
        next_obs, reward, done, step_info = env.step(action)
    except Exception as exc:  # noqa: BLE001 - reported with its fix
        where = target.data_dir or "its default data"
        return Check("environment", False, f"{target.env} from {where}: {type(exc).__name__}: {exc}",
                     "check env / data_dir (skillduet.env.* on verl); the data README lists the folders"), None
    took = time.perf_counter() - t0
    episode = {"task_id": task_id, "info": info, "obs": obs, "action": action, "next_obs": next_obs,
               "won": bool(step_info.get("won", False)), "reward": float(reward)}
    missing = [f for f in target.data_files if not Path(f).expanduser().exists()]
    if missing:
        return Check("environment", False, f"data.train_files {', '.join(missing)} not found (the environment "
                     "itself loads)", "build the dataset: python -m skillduet_plugin.integrations.verl.data --env "
                     f"{target.env} --out <dir>, then set data.train_files", took), episode
    return Check("environment", True, f"{target.env} ({len(env.tasks)} {target.split} tasks) reset "
                 f"{task_id} and took one step", seconds=took), episode


def _trajectory(target: Target, episode: dict) -> Any:

    info = episode["info"]
    return Trajectory(traj_id="doctor-0", task_id=str(episode["task_id"]), scope=str(info.get("task_type", "")),
                      task=str(info.get("task", "")), responses=[f"<action>{episode['action']}</action>"],
                      reward=episode["reward"], success=episode["won"], split="train",
                      metadata={"actions": [episode["action"]], "observations": [str(episode["next_obs"])],
                                "initial_observation": str(episode["obs"]), "env": target.env})


def check_analyzer(target: Target, episode: dict | None, timeout_s: float) -> Check:
    """One real extraction request to the configured analyzer, parsed into a Local skill."""

    cfg = target.method.analyzer
    if episode is None:
        return Check("analyzer", False, "not tried: the environment check failed", "fix the environment first")
    if cfg.kind == "transformers":
        return Check("analyzer", True, f"transformers in process ({cfg.model or 'the policy'}): loaded with the "
                     "job's model, not tried here")
    probe = replace(cfg, max_retries=0, timeout_s=min(float(cfg.timeout_s), timeout_s))
    where = f"{cfg.kind} {cfg.model} at {cfg.base_url}" if cfg.kind == "openai" else cfg.kind
    t0 = time.perf_counter()
    try:
        backend = make_backend(probe, role="analyzer")
        result, stats = extract_local([_trajectory(target, episode)], 0, backend,
                                      max_chars=target.method.max_skill_chars, env=target.env)
    except Exception as exc:  # noqa: BLE001 - reported with its fix
        return Check("analyzer", False, f"{where}: {type(exc).__name__}: {exc}", "check skillduet.analyzer.*",
                     time.perf_counter() - t0)
    took = time.perf_counter() - t0
    if result.skills:
        text = result.skills[0].text.replace("\n", " ")
        return Check("analyzer", True, f"{where} answered; parsed into a Local skill: {text[:80]!r}", seconds=took)
    error = backend.stats().get("last_error") or (result.rejected[0][0] if result.rejected else "no answer")
    fix = ("start the server or correct skillduet.analyzer.base_url / model (or analyzer.kind=offline)"
           if result.failures else "the reply had no <skill> block: check the model and skillduet.analyzer.*")
    return Check("analyzer", False, f"{where}: {error} ({stats.requests} request)", fix, took)


def check_trackers(target: Target) -> Check:
    """The configured trackers can start: their package imports; W&B has credentials or runs offline."""
    modules = {"tensorboard": "torch.utils.tensorboard", "wandb": "wandb"}
    problems, used = [], []
    for name in target.trackers:
        if name in ("console", "file", "none"):
            used.append(name)
            continue
        module = modules.get(name)
        if module is None:
            used.append(f"{name} (not checked)")
            continue
        try:
            __import__(module)
        except Exception as exc:  # noqa: BLE001 - reported with its fix
            problems.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        if name == "wandb" and not _wandb_ready():
            problems.append("wandb: no WANDB_API_KEY / netrc login and WANDB_MODE is not offline")
            continue
        used.append(name)
    if problems:
        return Check("tracker", False, "; ".join(problems), "pip install -e '.[trackers]'; for W&B `wandb login` "
                     "or WANDB_MODE=offline")
    if target.kind == "trl":
        extra = ", ".join(used) if used else "no trl.report_to tracker"
        return Check("tracker", True, f"metrics.jsonl in the run directory; {extra}")
    return Check("tracker", True, "trainer.logger=" + ",".join(used) if used else "trainer.logger is empty")


def _wandb_ready() -> bool:
    if os.environ.get("WANDB_MODE", "").lower() in ("offline", "disabled", "dryrun"):
        return True
    if os.environ.get("WANDB_API_KEY"):
        return True
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    return netrc.exists() and "api.wandb.ai" in netrc.read_text(errors="replace")


def check_bank(target: Target) -> Check:
    """The skill bank's folder can be created and written: a file and a SQLite database."""

    folder = Path(target.bank_dir).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".doctor-", suffix=".sqlite") as tmp:
            db = sqlite3.connect(tmp.name)
            db.execute("create table t (x)")
            db.commit()
            db.close()
    except Exception as exc:  # noqa: BLE001 - reported with its fix
        return Check("bank folder", False, f"{folder}: {type(exc).__name__}: {exc}",
                     "point output_dir (skillduet.bank_path / trainer.default_local_dir on verl) at a writable "
                     "folder")
    return Check("bank folder", True, f"{folder} is writable")


def run_checks(target: Target, *, timeout_s: float = 60.0, plugin_env: dict[str, str] | None = None,
               emit: Callable[[Check], None] = lambda c: None) -> list[Check]:
    """Every check in order; ``emit`` sees each as it finishes."""
    checks: list[Check] = []

    def add(check: Check) -> None:
        checks.append(check)
        emit(check)

    add(check_versions(target))
    if target.kind == "verl" or _installed("verl"):
        add(check_plugin(plugin_env))
    env_check, episode = check_environment(target)
    add(env_check)
    add(check_analyzer(target, episode, timeout_s))
    add(check_trackers(target))
    add(check_bank(target))
    return checks


def _installed(name: str) -> bool:
    try:
        importlib.metadata.version(name)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


__all__ = ["Check", "PLUGIN_PROBE", "Target", "check_analyzer", "check_bank", "check_environment", "check_plugin",
           "check_trackers", "check_versions", "run_checks", "run_target", "verl_target"]
