"""The LLM backend registry: ``@register_backend("name")`` on a :class:`~skillduet_plugin.llm.base.ChatBackend`
subclass makes it a valid ``analyzer.kind`` / ``synthesizer.kind``.

The built-in backends (``offline``, ``openai``, ``transformers``) register themselves in their own modules, which
are imported on the first lookup; a third-party backend registers itself before the config is built.
"""

from __future__ import annotations

import importlib
from typing import Any

from skillduet_plugin.core.registry import Registry

BUILTIN_BACKEND_MODULES = ("offline", "openai_backend", "hf_backend")


def _discover() -> None:
    for module in BUILTIN_BACKEND_MODULES:
        importlib.import_module(f"skillduet_plugin.llm.{module}")


BACKENDS: Registry[Any] = Registry("kind", "backends", discover=_discover)


def register_backend(name: str, *, replace: bool = False) -> Any:
    """Class decorator: ``@register_backend("mine") class MyBackend(ChatBackend): ...``."""
    return BACKENDS.register(name, replace=replace)


__all__ = ["BACKENDS", "register_backend"]
