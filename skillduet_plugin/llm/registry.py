"""The LLM backend registry: ``@register_backend("name")`` on a :class:`~skillduet_plugin.llm.base.ChatBackend`
subclass makes it a valid ``analyzer.kind`` / ``synthesizer.kind``.

The built-in backends (``offline``, ``openai``, ``transformers``) register themselves in their own modules, which
are imported on the first lookup; an installed package adds its own through the ``skillduet.backends`` entry-point
group (a module whose ``@register_backend`` runs on import), or any module registers one before the config is
built.
"""

from __future__ import annotations

import importlib
from typing import Any

from skillduet_plugin.core.registry import Registry

BUILTIN_BACKEND_MODULES = ("offline", "openai_backend", "hf_backend")


def _discover() -> None:
    for module in BUILTIN_BACKEND_MODULES:
        importlib.import_module(f"skillduet_plugin.llm.{module}")


#: The entry-point group through which an installed package adds LLM backends.
ENTRY_POINT_GROUP = "skillduet.backends"
BACKENDS: Registry[Any] = Registry("kind", "backends", discover=_discover, group=ENTRY_POINT_GROUP)


def register_backend(name: str, *, replace: bool = False) -> Any:
    """Class decorator: ``@register_backend("mine") class MyBackend(ChatBackend): ...``."""
    return BACKENDS.register(name, replace=replace)


__all__ = ["BACKENDS", "ENTRY_POINT_GROUP", "register_backend"]
