"""Run settings from the command line and YAML files: ``key=value`` overrides parsed as YAML scalars, set at
their dotted path, and nested mappings merged (``runs.config.load_run_config`` applies them in that order)."""

from __future__ import annotations

import copy
from typing import Any, Mapping, Sequence

import yaml

from skillduet_plugin.core.settings import ConfigError


def parse_value(text: str) -> Any:
    """A command-line value as YAML reads it: ``3`` -> 3, ``0.25`` -> 0.25, ``true`` -> True, ``null`` -> None,
    ``[a, b]`` -> list; anything else stays a string."""

    try:
        return yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        return text


def config_and_overrides(positionals: Sequence[str | None]) -> tuple[str | None, list[str]]:
    """A command line's positionals in any order: the one without ``=`` is the YAML config file (None: none
    given), the others are ``key=value`` overrides, in their order."""
    given = [p for p in positionals if p is not None]
    files = [p for p in given if "=" not in p]
    if len(files) > 1:
        raise ConfigError(f"config={files[1]!r} is invalid: give one YAML config file (got {', '.join(files)}); "
                          "settings go as key=value")
    return (files[0] if files else None), [p for p in given if "=" in p]


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


def set_path(data: dict[str, Any], path: list[str], value: Any, where: str) -> None:
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


def key_paths(data: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """The leaf key paths a (nested) mapping sets: ``{"a": {"b": 1}, "c": 2}`` -> ``{("a", "b"), ("c",)}``."""
    paths: set[tuple[str, ...]] = set()
    for key, value in data.items():
        if isinstance(value, Mapping):
            paths |= key_paths(value, prefix + (str(key),))
        else:
            paths.add(prefix + (str(key),))
    return paths


def merge(base: dict[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            merge(base[key], value)
        else:
            base[key] = copy.deepcopy(value)
    return base
