"""The one config language of every SkillDuet settings class (method, backends, runs, TRL, verl).

A field is declared once with :func:`setting`: its default, its help text (``metadata["help"]``, the text
``skillduet train --help`` and the docs render) and its constraint (``metadata["check"]``). :func:`validate_fields`
checks every declared constraint through the one helper :func:`check`; :func:`check_keys` is the one
unknown-key check. Every failure is a :class:`ConfigError` of one line: ``field=value is invalid: the fix``.

This module imports nothing from the package (and nothing but the standard library), so every layer may use it.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import math
import textwrap
import types
import typing
import warnings
from typing import Any, Callable, Iterable, Mapping, NoReturn, Sequence

#: An unknown-key error lists the allowed keys when there are at most this many (else it names near misses).
LIST_AT_MOST = 40

#: ``check(kind=...)`` values: what type a value must have.
KINDS = ("int", "number", "bool", "str", "mapping", "path")


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the field, the value and the fix.

    Errors raised by :func:`invalid` and :func:`check_keys` remember their parts, so that a section that
    validates a nested one can name the full dotted key: ``err.under("skillduet")``.
    """

    def __init__(self, message: str, *, field: str | None = None, value: Any = None, fix: str = "",
                 unknown: Sequence[str] | None = None, section: str = "",
                 allowed: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.field, self.value, self.fix = field, value, fix
        self.unknown, self.section, self.allowed = unknown, section, tuple(allowed)

    def under(self, prefix: str) -> "ConfigError":
        """The same error for the section nested under ``prefix`` (``keep_ratio`` -> ``skillduet.keep_ratio``)."""
        if self.field is not None:
            return invalid_error(f"{prefix}.{self.field}", self.value, self.fix)
        if self.unknown is not None:
            return unknown_keys_error(f"{prefix}.{self.section}" if self.section else prefix, self.unknown,
                                      self.allowed)
        return ConfigError(f"{prefix}: {self}")


def invalid_error(name: str, value: Any, fix: str) -> ConfigError:
    """The one-line error ``name=value is invalid: fix``."""
    return ConfigError(f"{name}={value!r} is invalid: {fix}", field=name, value=value, fix=fix)


def invalid(name: str, value: Any, fix: str) -> NoReturn:
    """Raise :func:`invalid_error`."""
    raise invalid_error(name, value, fix)


def unknown_keys_error(section: str, unknown: Sequence[str], allowed: Sequence[str],
                       source: str = "its settings class") -> ConfigError:
    """``unknown setting(s) section.key: allowed keys of section are ...`` ('' section: the top level)."""
    dotted = ", ".join(f"{section}.{k}" if section else k for k in unknown)
    where = f" of {section}" if section else ""
    if len(allowed) <= LIST_AT_MOST:
        fix = f"allowed keys{where} are {', '.join(sorted(allowed))}"
    else:  # a framework's config (TRL's GRPOConfig has ~200 fields): name the near misses, not the whole list
        close = [m for k in unknown for m in difflib.get_close_matches(str(k), list(allowed), n=3)]
        fix = (f"did you mean {', '.join(dict.fromkeys(close))}? " if close else "") + \
            f"(the {len(allowed)} keys{where} are the fields of {source})"
    return ConfigError(f"unknown setting(s) {dotted}: {fix}", unknown=list(unknown), section=section,
                       allowed=allowed)


def check(name: str, value: Any, *, kind: str | None = None, choices: Sequence[Any] | None = None,
          lo: float | None = None, hi: float | None = None, lo_open: bool = False, hi_open: bool = False,
          optional: bool = False, fix: str | None = None) -> None:
    """The validation helper: ``value`` of field ``name`` has ``kind``, is one of ``choices`` and lies in
    ``[lo, hi]`` (open ends with ``lo_open``/``hi_open``); ``optional`` allows None. ``fix`` replaces the
    generated advice."""
    if optional and value is None:
        return
    if choices is not None:
        if value not in choices:
            invalid(name, value, fix or f"allowed values are {', '.join(map(str, choices))}")
        return
    if kind == "bool":
        if not isinstance(value, bool):
            invalid(name, value, fix or "expected true or false")
        return
    if kind in ("str", "path"):
        if not isinstance(value, str) or not value:
            invalid(name, value, fix or ("expected a folder or file path" if kind == "path" else "expected text"))
        return
    if kind == "mapping":
        if not isinstance(value, Mapping):
            invalid(name, value, fix or "expected a mapping of key: value settings")
        return
    if kind not in (None, "int", "number"):
        raise ValueError(f"kind={kind!r} is invalid: allowed values are {', '.join(KINDS)}")
    if lo is None and hi is None and kind is None:
        return
    bound = _bounds_text(lo, hi, lo_open, hi_open)
    what = "an integer" if kind == "int" else "a number"
    advice = fix or f"expected {what}{bound}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        invalid(name, value, advice)
    if kind == "int" and not float(value).is_integer():
        invalid(name, value, advice)
    if isinstance(value, float) and not math.isfinite(value):
        invalid(name, value, fix or f"expected a finite number{bound}")
    if lo is not None and (value <= lo if lo_open else value < lo):
        invalid(name, value, advice)
    if hi is not None and (value >= hi if hi_open else value > hi):
        invalid(name, value, advice)


def _bounds_text(lo: float | None, hi: float | None, lo_open: bool, hi_open: bool) -> str:
    if lo is not None and hi is not None:
        return f" in {'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"
    if lo is not None:
        return f" {'>' if lo_open else '>='} {lo}"
    if hi is not None:
        return f" {'<' if hi_open else '<='} {hi}"
    return ""


def setting(default: Any = dataclasses.MISSING, help: str = "", *,  # noqa: A002 - the dataclass convention
            default_factory: Callable[[], Any] | None = None, **constraint: Any) -> Any:
    """A dataclass field with its help text and its constraint (``check`` keywords), declared once."""
    metadata = {"help": help, "check": constraint} if constraint else {"help": help}
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def validate_fields(obj: Any, prefix: str = "", checks: Mapping[str, Mapping[str, Any]] | None = None) -> None:
    """Check every field of the dataclass ``obj`` that declares a constraint (or the given ``checks``,
    ``field name -> check keywords``, for classes whose metadata belongs to someone else, such as TRL's)."""
    if checks is None:
        checks = {f.name: f.metadata["check"] for f in dataclasses.fields(obj) if "check" in f.metadata}
    for name, constraint in checks.items():
        check(f"{prefix}{name}", getattr(obj, name), **constraint)


def check_keys(section: str, data: Mapping[str, Any], known: Iterable[str] | type) -> None:
    """The unknown-key check: every key of ``data`` (a mapping for ``section``, '' at the top level) must be
    one of ``known`` (names, or a dataclass whose fields are the names)."""
    names = {f.name for f in dataclasses.fields(known)} if isinstance(known, type) else set(known)
    unknown = sorted(str(k) for k in data if k not in names)
    if unknown:
        raise unknown_keys_error(section, unknown, sorted(names),
                                 known.__name__ if isinstance(known, type) else "its settings class")


#: The release that stops accepting the deprecated setting names (each still works, with a warning, until then).
REMOVED_IN = "0.2"


class SettingRenamed(FutureWarning):
    """A setting was given under its old name; the value is used under the new one (for one release)."""


def take_renamed(data: Mapping[str, Any], renamed: Mapping[str, str], section: str = "",
                 defaults: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``data`` (nested mappings) with each old dotted key of ``renamed`` (``old -> new``, both relative to
    ``data``) moved to its new name, and a one-line :class:`SettingRenamed` warning; a None value under the old
    name counts as absent (a Hydra node may list the old key as null). Old and new both set (the new one to
    another value than its entry in ``defaults``, when given): a ConfigError."""
    out = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in data.items()}
    prefix = f"{section}." if section else ""
    for old, new in renamed.items():
        *old_parents, old_leaf = old.split(".")
        node = _node(out, old_parents)
        if node is None or old_leaf not in node:
            continue
        value = node.pop(old_leaf)
        if value is None:
            continue
        *new_parents, new_leaf = new.split(".")
        target = _node(out, new_parents, create=True)
        default = (_node(dict(defaults), new_parents) or {}).get(new_leaf) if defaults is not None else None
        if target.get(new_leaf) not in (None, value, default):
            invalid(f"{prefix}{old}", value, f"it is the old name of {prefix}{new}, which is set too: keep "
                    f"{prefix}{new} only")
        target[new_leaf] = value
        # warn_explicit without a source line: the message is the one line printed
        warnings.warn_explicit(f"{prefix}{old} is deprecated and stops working in skillduet {REMOVED_IN}: write "
                               f"{prefix}{new}", SettingRenamed, filename="skillduet", lineno=0)
    return out


def _node(data: dict[str, Any], parents: Sequence[str], create: bool = False) -> dict[str, Any] | None:
    for key in parents:
        child = data.get(key)
        if not isinstance(child, dict):
            if not create or child is not None:
                return None
            child = data[key] = {}
        data = child
    return data


def matches_type(value: Any, annotation: Any) -> bool:
    """Whether ``value`` (as YAML or an override gives it) fits a field's type annotation: ``int``, ``float``
    (an integer too), ``bool``, ``str``, unions and ``Optional``, ``Literal``, enums (a member or its value),
    ``list[...]`` / ``dict[...]`` (the container and, for lists, the items) and plain classes. An annotation it
    does not understand (a string, a type variable) accepts the value: the framework then judges it."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is Any:
        return True
    if annotation is None or annotation is type(None):
        return value is None
    if origin in (typing.Union, types.UnionType):
        return any(matches_type(value, arg) for arg in args)
    if origin is typing.Literal:
        return any(value == arg and type(value) is type(arg) for arg in args)
    if origin in (list, tuple, set, frozenset):
        if not isinstance(value, (list, tuple)):
            return False
        return not args or origin is tuple or all(matches_type(item, args[0]) for item in value)
    if origin is not None:
        return isinstance(value, origin) if isinstance(origin, type) else True
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return isinstance(value, annotation) or any(value == m.value for m in annotation)
    if isinstance(annotation, type):
        return isinstance(value, annotation)
    return True


def type_text(annotation: Any) -> str:
    """An annotation as a config error names it: ``int | None`` -> ``int or null``."""
    if annotation is type(None) or annotation is None:
        return "null"
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(dict.fromkeys(type_text(arg) for arg in args))
    if origin is typing.Literal:
        return " or ".join(repr(arg) for arg in args)
    if origin is not None:
        return getattr(origin, "__name__", str(origin))
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "one of " + ", ".join(str(m.value) for m in annotation)
    return getattr(annotation, "__name__", str(annotation))


def check_types(section: str, data: Mapping[str, Any], cls: type) -> None:
    """Every value of ``data`` (keys already checked with :func:`check_keys`) fits the annotation of the field
    of the dataclass ``cls`` it sets; else one :class:`ConfigError` line ``section.key=value is invalid``."""
    hints = typing.get_type_hints(cls)
    for key, value in data.items():
        if key in hints and not matches_type(value, hints[key]):
            invalid(f"{section}.{key}" if section else str(key), value,
                    f"expected {type_text(hints[key])} (the type of {cls.__name__}.{key})")


def field_docs(cls: type, prefix: str = "") -> list[tuple[str, str, str]]:
    """``(dotted key, default, help)`` for every field of ``cls`` with help text; a nested settings class
    (a field whose default is a dataclass instance) is expanded under its own prefix."""
    rows: list[tuple[str, str, str]] = []
    for f in dataclasses.fields(cls):
        default = _default(f)
        if dataclasses.is_dataclass(default) and not isinstance(default, type):
            rows += field_docs(type(default), f"{prefix}{f.name}.")
            continue
        if f.metadata.get("help"):
            rows.append((f"{prefix}{f.name}", _render_default(default), str(f.metadata["help"])))
    return rows


def declared_default(cls: type, name: str) -> Any:
    """The default that dataclass ``cls`` declares for its field ``name`` (the one place a setting's default lives)."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            return _default(f)
    raise KeyError(f"{cls.__name__} has no setting {name!r}")


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return None


def _render_default(value: Any) -> str:
    if value is None:
        return "null"
    if value == "":
        return '""'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {_render_default(v)}" for k, v in value.items()) + "}" if value else "{}"
    return str(value)


def render_markdown(rows: Sequence[tuple[str, str, str]]) -> str:
    """The docs table of :func:`field_docs` rows."""
    lines = ["| key | default | what it sets |", "|---|---|---|"]
    lines += [f"| `{key}` | `{default}` | {_md(text)} |" for key, default, text in rows]
    return "\n".join(lines) + "\n"


def _md(text: str) -> str:
    return text.replace("|", "/").replace("<", "\\<").replace(">", "\\>")


def render_text(rows: Sequence[tuple[str, str, str]], width: int = 100) -> str:
    """The ``--help`` epilog of :func:`field_docs` rows: one key per entry, its help indented below."""

    out = []
    for key, default, text in rows:
        out.append(f"  {key} (default {default})")
        out += textwrap.wrap(text, width=width, initial_indent="      ", subsequent_indent="      ")
    return "\n".join(out)


__all__ = ["ConfigError", "KINDS", "REMOVED_IN", "SettingRenamed", "check", "check_keys", "check_types",
           "field_docs", "invalid", "invalid_error", "matches_type", "render_markdown", "render_text", "setting",
           "take_renamed", "type_text", "unknown_keys_error", "validate_fields"]
