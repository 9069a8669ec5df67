"""The ``verl.plugins`` entry point: importing this module registers SkillDuet with verl, cheaply and loudly.

verl imports every ``verl.plugins`` entry point on ``import verl`` (driver, TaskRunner and every Ray worker) and
only logs a failure at debug level. So this module imports nothing heavy: it installs post-import hooks that
register the ``skillduet_sync`` trainer when verl imports ``verl.trainer.ppo.v1`` and the ``skillduet_agent``
loop when it imports ``verl.experimental.agent_loop`` (or at once, if they are already imported). A failing
registration is printed to stderr, logged as an error and raised as a warning, and kept in :data:`FAILURES`.

It also wraps ``verl.utils.config.validate_config``, which verl's entry modules call with the composed config in
the driver before Ray starts: with ``trainer.plugins=[skillduet]`` the wrapper switches the config to SkillDuet
(``settings.apply_plugins``), so stock ``python -m verl.trainer.main_ppo ... +trainer.plugins=[skillduet]`` runs
SkillDuet; a bad or unread ``skillduet`` key stops the run there with one line on stderr (exit code 2).
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.util
import logging
import sys
import threading
import traceback
import warnings
from typing import Any, Callable

from skillduet_plugin.core.registry import resolve_target
from skillduet_plugin.core.settings import ConfigError
from skillduet_plugin.integrations.verl import AGENT_LOOP_NAME, PLUGIN_NAME, TRAINER_NAME
from skillduet_plugin.integrations.verl.settings import apply_plugins

logger = logging.getLogger(__name__)

# verl package -> our module whose import registers into that package's registry
REGISTRATIONS: dict[str, str] = {
    "verl.trainer.ppo.v1": "skillduet_plugin.integrations.verl.trainer",
    "verl.experimental.agent_loop": "skillduet_plugin.integrations.verl.agent_loop",
    "verl.trainer.distillation": "skillduet_plugin.integrations.verl.distillation",
}
# verl module -> compatibility fix applied right after verl imports it
COMPAT_FIXES: dict[str, str] = {
    "verl.models.transformers.monkey_patch": "skillduet_plugin.integrations.verl.plugin:_fix_trl_value_head",
    "verl.utils.config": "skillduet_plugin.integrations.verl.plugin:_wrap_validate_config",
    "verl.workers.engine.fsdp.transformer_impl": "skillduet_plugin.integrations.verl.shared_prefix:install",
}
#: (our module, formatted error) of every registration that failed in this process
FAILURES: list[tuple[str, str]] = []
_lock = threading.Lock()


class SkillDuetPluginError(RuntimeError):
    """A SkillDuet registration with verl failed; the message carries the original traceback."""


def _report(module: str, exc: BaseException) -> None:
    detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    FAILURES.append((module, detail))
    message = (f"[skillduet] verl plugin registration FAILED while importing {module}: {exc!r}. "
               f"The '{TRAINER_NAME}' trainer / '{AGENT_LOOP_NAME}' agent loop are NOT available in this process.")
    print(message + "\n" + detail, file=sys.stderr, flush=True)
    logger.error(message)
    warnings.warn(message, RuntimeWarning, stacklevel=2)


def _register(module: str) -> None:
    try:
        importlib.import_module(module)
    except Exception as exc:  # reported loudly, never swallowed
        _report(module, exc)


def _fix_trl_value_head() -> None:
    """verl 0.9.1 patches TRL's ``AutoModelForCausalLMWithValueHead`` whenever TRL is installed, but TRL >= 1.x
    no longer ships that class, so building any FSDP model fails with ImportError next to TRL 1.16 (our TRL
    adapter's dependency). verl only needs the patch for TRL value-head models, which SkillDuet never builds;
    tell verl TRL is absent in that case."""
    module = sys.modules["verl.models.transformers.monkey_patch"]
    try:  # lazy: trl (probes which trl release is installed)
        from trl.experimental.ppo import AutoModelForCausalLMWithValueHead  # noqa: F401
        return
    except ImportError:
        pass
    try:  # lazy: trl (probes which trl release is installed)
        from trl import AutoModelForCausalLMWithValueHead  # noqa: F401,F811
        return
    except ImportError:
        module.is_trl_available = lambda: False


def _wrap_validate_config() -> None:
    """``validate_config(config, ...)`` of verl's entry modules applies ``trainer.plugins=[skillduet]`` first."""
    module = sys.modules["verl.utils.config"]
    original = module.validate_config
    if getattr(original, "__skillduet__", False):
        return

    @functools.wraps(original)
    def validate_config(config: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            enabled = apply_plugins(config)
        except ConfigError as err:  # one line, before Ray starts (Hydra would print a traceback)
            print(f"skillduet: {err}", file=sys.stderr, flush=True)
            raise SystemExit(2) from None
        result = original(config, *args, **kwargs)
        if enabled:
            ensure_registered()  # a broken installation stops here too
        return result

    validate_config.__skillduet__ = True
    module.validate_config = validate_config


def _run_fix(target: str) -> None:
    try:
        resolve_target(target)()
    except Exception as exc:
        _report(target, exc)


class _HookedLoader(importlib.abc.Loader):
    """Delegates to the real loader, then runs the registration once the package body has executed."""

    def __init__(self, loader: Any, callback: Callable[[], None]) -> None:
        self._loader = loader
        self._callback = callback

    def create_module(self, spec):  # noqa: D401 - importlib protocol
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        self._callback()

    def __getattr__(self, name: str) -> Any:  # resource readers, is_package, get_source ...
        return getattr(self._loader, name)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Wraps the loader of the watched packages; finds nothing itself."""

    def __init__(self) -> None:
        self.pending: dict[str, Callable[[], None]] = {}
        self._searching: set[str] = set()

    def find_spec(self, fullname, path=None, target=None):
        callback = self.pending.get(fullname)
        if callback is None or fullname in self._searching:
            return None
        self._searching.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._searching.discard(fullname)
        if spec is None or spec.loader is None:
            return spec
        del self.pending[fullname]
        spec.loader = _HookedLoader(spec.loader, callback)
        return spec


_finder = _PostImportFinder()


def install() -> None:
    """Register now what verl already imported, hook the rest (idempotent)."""
    with _lock:
        actions = [(package, lambda m=module: _register(m)) for package, module in REGISTRATIONS.items()]
        actions += [(package, lambda t=target: _run_fix(t)) for package, target in COMPAT_FIXES.items()]
        for package, action in actions:
            if package in sys.modules:
                _finder.pending.pop(package, None)
                action()
            elif package not in _finder.pending:
                _finder.pending[package] = action
        if _finder.pending and _finder not in sys.meta_path:
            sys.meta_path.insert(0, _finder)


def ensure_registered() -> None:
    """Import verl's trainer and agent-loop packages now and raise if SkillDuet is not registered in them.

    ``python -m skillduet_plugin.main_ppo`` calls this so a broken installation stops before Ray starts.
    """
    install()
    importlib.import_module("verl.trainer.ppo.v1")
    importlib.import_module("verl.experimental.agent_loop")
    importlib.import_module("verl.trainer.distillation")
    if FAILURES:
        module, detail = FAILURES[-1]
        raise SkillDuetPluginError(f"registering SkillDuet with verl failed in {module}:\n{detail}")
    status = registration_status()
    missing = [name for name, ok in status.items() if not ok]
    if missing:
        raise SkillDuetPluginError(f"SkillDuet is not registered with verl: missing {', '.join(missing)}")


def registration_status() -> dict[str, bool]:
    """Which SkillDuet components the verl registries of this process hold (without importing verl)."""
    status = {f"trainer:{TRAINER_NAME}": False, f"agent_loop:{AGENT_LOOP_NAME}": False}
    trainer_base = sys.modules.get("verl.trainer.ppo.v1.trainer_base")
    if trainer_base is not None:
        status[f"trainer:{TRAINER_NAME}"] = TRAINER_NAME in trainer_base.TRAINER_REGISTRY
    agent_loop = sys.modules.get("verl.experimental.agent_loop.agent_loop")
    if agent_loop is not None:
        status[f"agent_loop:{AGENT_LOOP_NAME}"] = AGENT_LOOP_NAME in agent_loop._agent_loop_registry
    losses = sys.modules.get("verl.trainer.distillation.losses")
    status["distillation_loss:skillduet_opd"] = losses is not None and "skillduet_opd" in \
        losses.DISTILLATION_LOSS_REGISTRY
    return status


install()

__all__ = ["FAILURES", "PLUGIN_NAME", "REGISTRATIONS", "SkillDuetPluginError", "ensure_registered", "install",
           "registration_status"]
