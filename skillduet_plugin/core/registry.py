"""Name -> implementation registries with a decorator (environments, LLM backends, ...).

``REG = Registry("env", "environments")``; ``@REG.register("alfworld")`` above a definition registers it;
``REG.get(name)`` returns it or raises :class:`UnknownNameError` listing the registered names, in the same one
line as every config error (``env='x' is invalid: registered environments are ...``). A registry may be given a
``discover`` function that imports the built-in implementations on first use, so that registering stays in the
module that implements the thing and heavy modules are imported only when asked for, and an entry-point group
(``skillduet.selectors``, ``skillduet.backends``, ...) through which an installed package adds its own: each entry
point names a module (imported, so that its decorators run) or a function without parameters (called, to
register). Both load on the first lookup, in every process that looks a name up (verl's Ray workers included).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import threading
from typing import Any, Callable, Generic, Iterator, TypeVar

from skillduet_plugin.core.settings import ConfigError

T = TypeVar("T")


class UnknownNameError(ConfigError, KeyError):
    """A name no implementation is registered under (a ``ConfigError`` and a ``KeyError``)."""

    def __str__(self) -> str:  # KeyError would print the message with quotes around it
        return str(self.args[0]) if self.args else ""


class Registry(Generic[T]):
    """One kind of named implementation; ``field`` names the setting that selects one in errors, ``group`` the
    entry-point group of installed packages that add to it."""

    def __init__(self, field: str, plural: str, discover: Callable[[], None] | None = None, *,
                 group: str | None = None) -> None:
        self.field, self.plural, self.group = field, plural, group
        self._items: dict[str, T] = {}
        self._discover = discover
        self._discovered = discover is None and group is None
        self._discovering = False
        self._failure: Exception | None = None
        self._lock = threading.RLock()

    def register(self, name: str, value: Any = None, *, replace: bool = False) -> Any:
        """``@registry.register(name)`` above a definition, or ``registry.register(name, value)``; registering
        a taken name raises unless ``replace=True`` (tests, overriding a built-in on purpose)."""
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{self.field}={name!r} is invalid: a registered name is non-empty text")

        def add(item: T) -> T:
            if name in self._items and not replace and self._items[name] is not item:
                raise ConfigError(f"{self.field}={name!r} is already registered: pick another name or pass "
                                  f"replace=True")
            self._items[name] = item
            return item

        return add if value is None else add(value)

    def peek(self, name: str) -> T | None:
        """What is registered as ``name`` so far, without loading anything (for registering code)."""
        return self._items.get(name)

    def unregister(self, name: str) -> T | None:
        return self._items.pop(name, None)

    def get(self, name: str) -> T:
        self._load()
        if name not in self._items:
            raise UnknownNameError(f"{self.field}={name!r} is invalid: registered {self.plural} are "
                                   f"{', '.join(self.names())}")
        return self._items[name]

    def names(self) -> list[str]:
        self._load()
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def _load(self) -> None:
        if self._discovered:
            self._raise_failure()
            return
        # Other threads wait here until discovery is complete (verl's agent loop makes environments from several
        # executor threads at once: one saw a half-filled registry); the discovering thread itself may look
        # names up while registering and gets what is registered so far.
        with self._lock:
            if self._discovered:
                self._raise_failure()
                return
            if self._discovering:
                return
            self._discovering, self._failure = True, None
            try:
                if self._discover is not None:
                    self._discover()
                if self.group is not None:
                    load_entry_points(self.group)
            except Exception as exc:
                # What registered before the failure is a partial registry: every later lookup raises the same
                # error rather than using it (a retry could re-run half-imported modules' decorators).
                self._failure = exc
                raise
            finally:
                self._discovering, self._discovered = False, True

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure


def load_entry_points(group: str) -> list[str]:
    """Load the entry points of ``group`` of every installed package: each names a module (imported: its
    decorators register), a function without parameters (called, to register) or a registered object (a backend
    class, a score function with required parameters: importing its module registered it). A function whose
    parameters all have defaults (an environment factory, say) is refused: calling it at discovery would run it,
    not register it. Returns their names; one that fails is a one-line :class:`ConfigError` naming the entry
    point."""
    names = []
    for entry in importlib.metadata.entry_points(group=group):
        dist = f", package {entry.dist.name} {entry.dist.version}" if entry.dist is not None else ""
        loading = _loading()
        loading.append(f"entry point {entry.name} = {entry.value!r} of group {group}{dist}")
        try:
            loaded = entry.load()
            defaulted = inspect.isfunction(loaded) and _callable_without_arguments(loaded)
            if defaulted and not inspect.signature(loaded).parameters:
                loaded()
        except Exception as exc:
            first = (str(exc).splitlines() or [""])[0]
            raise ConfigError(f"entry point {entry.name} = {entry.value!r} of group {group} failed to load "
                              f"({type(exc).__name__}: {first}): fix or uninstall the package that declares "
                              f"it") from exc
        finally:
            loading.pop()
        if defaulted and inspect.signature(loaded).parameters:
            raise ConfigError(f"entry point {entry.name} = {entry.value!r} of group {group} names a function whose "
                              f"parameters all have defaults, which discovery would call: point it at the module "
                              f"that registers, or at a function without parameters that registers")
        names.append(entry.name)
    return names


#: per thread, the entry points being loaded, innermost last (loading one may look names up in another group)
_THREAD = threading.local()


def _loading() -> list[str]:
    if not hasattr(_THREAD, "loading"):
        _THREAD.loading = []
    return _THREAD.loading


def loading_entry_point() -> str | None:
    """The entry point this thread is loading now (``entry point NAME = 'VALUE' of group G, package P V``), or
    None: what registers itself can say which installed package provided it."""
    loading = _loading()
    return loading[-1] if loading else None


def _callable_without_arguments(fn: Callable[..., Any]) -> bool:
    return all(p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
               for p in inspect.signature(fn).parameters.values())


def resolve_target(target: str, field: str = "target") -> Any:
    """The object a ``"package.module:attr"`` string names (``attr`` may be dotted: ``module:Class.method``),
    the one resolver of such strings (environment factories, prompt functions, verl's compatibility fixes).
    A string of another form is one :class:`ConfigError` line naming ``field``; the import runs only here, so a
    target's module is imported when the target is first used."""
    module_name, sep, attr = str(target).partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"{field}={target!r} is invalid: expected 'package.module:attr'")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


__all__ = ["Registry", "UnknownNameError", "load_entry_points", "loading_entry_point", "resolve_target"]
