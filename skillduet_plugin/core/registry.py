"""Name -> implementation registries with a decorator (environments, LLM backends, ...).

``REG = Registry("env", "environments")``; ``@REG.register("alfworld")`` above a definition registers it;
``REG.get(name)`` returns it or raises :class:`UnknownNameError` listing the registered names, in the same one
line as every config error (``env='x' is invalid: registered environments are ...``). A registry may be given a
``discover`` function that imports the built-in implementations on first use, so that registering stays in the
module that implements the thing and heavy modules are imported only when asked for.
"""

from __future__ import annotations

import importlib
import threading
from typing import Any, Callable, Generic, Iterator, TypeVar

from skillduet_plugin.core.settings import ConfigError

T = TypeVar("T")


class UnknownNameError(ConfigError, KeyError):
    """A name no implementation is registered under (a ``ConfigError`` and a ``KeyError``)."""

    def __str__(self) -> str:  # KeyError would print the message with quotes around it
        return str(self.args[0]) if self.args else ""


class Registry(Generic[T]):
    """One kind of named implementation; ``field`` names the setting that selects one in errors."""

    def __init__(self, field: str, plural: str, discover: Callable[[], None] | None = None) -> None:
        self.field, self.plural = field, plural
        self._items: dict[str, T] = {}
        self._discover = discover
        self._discovered = discover is None
        self._discovering = False
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
            return
        # Other threads wait here until discovery is complete (verl's agent loop makes environments from several
        # executor threads at once: one saw a half-filled registry); the discovering thread itself may look
        # names up while registering and gets what is registered so far.
        with self._lock:
            if self._discovered or self._discovering:
                return
            self._discovering = True
            try:
                assert self._discover is not None
                self._discover()
            finally:
                self._discovering, self._discovered = False, True


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


__all__ = ["Registry", "UnknownNameError", "resolve_target"]
