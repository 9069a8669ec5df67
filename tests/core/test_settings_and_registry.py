"""The config language (one check helper, one unknown-key check, help from field metadata) and the registries."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import pytest

from skillduet_plugin.core.registry import Registry, UnknownNameError
from skillduet_plugin.core.settings import (ConfigError, check, check_keys, field_docs, render_markdown, setting,
                                            validate_fields)


@pytest.mark.parametrize("value,kw,message", [
    (0, {"kind": "int", "lo": 1}, "n=0 is invalid: expected an integer >= 1"),
    (2.5, {"kind": "int", "lo": 1}, "n=2.5 is invalid: expected an integer >= 1"),
    (True, {"lo": 0}, "n=True is invalid: expected a number >= 0"),
    (float("nan"), {"lo": 0}, "n=nan is invalid: expected a finite number >= 0"),
    (1.5, {"lo": 0, "hi": 1, "lo_open": True}, "n=1.5 is invalid: expected a number in (0, 1]"),
    ("x", {"choices": ("a", "b")}, "n='x' is invalid: allowed values are a, b"),
    ("yes", {"kind": "bool"}, "n='yes' is invalid: expected true or false"),
    ([], {"kind": "mapping"}, "n=[] is invalid: expected a mapping of key: value settings"),
    (3, {"kind": "int", "hi": 2, "fix": "keep it small"}, "n=3 is invalid: keep it small"),
])
def test_check_names_field_value_and_fix(value, kw, message):
    with pytest.raises(ConfigError) as err:
        check("n", value, **kw)
    assert str(err.value) == message


def test_check_accepts_good_values_and_optional_none():
    check("n", 1, kind="int", lo=1)
    check("n", 1.0, kind="int", lo=1)
    check("n", None, kind="int", lo=1, optional=True)
    check("n", "b", choices=("a", "b"))


@dataclass
class _Inner:
    depth: int = setting(1, "how deep", kind="int", lo=0)


@dataclass
class _Outer:
    rate: float = setting(0.5, "a rate", lo=0, hi=1)
    inner: _Inner = setting(help="nested", default_factory=_Inner)


def test_fields_declare_help_and_constraint_once():
    validate_fields(_Outer())
    with pytest.raises(ConfigError, match=r"^outer.rate=2 is invalid: expected a number in \[0, 1\]$"):
        validate_fields(_Outer(rate=2), "outer.")
    assert field_docs(_Outer) == [("rate", "0.5", "a rate"), ("inner.depth", "1", "how deep")]
    assert "| `inner.depth` | `1` | how deep |" in render_markdown(field_docs(_Outer))


def test_errors_move_under_a_section_prefix():
    with pytest.raises(ConfigError) as err:
        check_keys("analyzer", {"modle": 1, "kind": 2}, ["kind", "model"])
    assert str(err.value) == "unknown setting(s) analyzer.modle: allowed keys of analyzer are kind, model"
    assert str(err.value.under("skillduet")) == ("unknown setting(s) skillduet.analyzer.modle: allowed keys of "
                                                 "skillduet.analyzer are kind, model")
    with pytest.raises(ConfigError) as err:
        check("keep_ratio", 2, lo=0, hi=1)
    assert str(err.value.under("skillduet")) == "skillduet.keep_ratio=2 is invalid: expected a number in [0, 1]"


def test_registry_decorator_lookup_and_error_listing_names():
    reg: Registry[object] = Registry("widget", "widgets")

    @reg.register("b")
    def make_b():
        return "b"

    reg.register("a", lambda: "a")
    assert reg.get("b") is make_b and reg.names() == ["a", "b"] and "a" in reg
    with pytest.raises(UnknownNameError) as err:
        reg.get("c")
    assert str(err.value) == "widget='c' is invalid: registered widgets are a, b"
    assert isinstance(err.value, KeyError) and isinstance(err.value, ConfigError)
    with pytest.raises(ConfigError, match="already registered"):
        reg.register("a", lambda: "other")


def test_registry_discovers_on_first_lookup():
    calls = []
    reg: Registry[str] = Registry("thing", "things", discover=lambda: calls.append(reg.register("x", "X")))
    assert calls == []
    assert reg.get("x") == "X" and len(calls) == 1
    reg.names()
    assert len(calls) == 1


def test_registry_lookups_from_several_threads_wait_for_discovery():
    """verl's agent loop makes environments from several executor threads at once; a thread that came second
    used to see the registry marked discovered but still empty."""
    import threading
    import time

    def discover():
        time.sleep(0.2)  # a slow import: the other threads arrive meanwhile
        reg.register("x", "X")
        assert reg.get("x") == "X"  # the discovering thread may look names up while registering

    reg: Registry[str] = Registry("thing", "things", discover=discover)
    results, errors = [], []

    def lookup():
        try:
            results.append(reg.get("x"))
        except Exception as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=lookup) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and results == ["X"] * 4


def test_backend_registry_lists_its_kinds():
    from skillduet_plugin.llm import BACKENDS, BackendConfig, make_backend

    assert BACKENDS.names() == ["offline", "openai", "transformers"]
    with pytest.raises(ConfigError, match="analyzer.kind='vllm' is invalid: allowed values are offline, openai, "
                                          "transformers"):
        make_backend(BackendConfig(kind="vllm"))


def test_a_registry_loads_its_entry_point_group_on_the_first_lookup(monkeypatch):
    """An installed package's entry point: a module is imported, a function without arguments called, a registered
    object (a score function, a class) only imported; a broken one is a one-line error naming it."""
    import importlib.metadata
    import types

    reg = Registry("thing", "things", group="skillduet.things")
    module = types.ModuleType("outside_things")

    def register() -> None:
        reg.register("called", 1)

    def scored(shifts, advantages, successes):  # must not be called by the loader
        raise AssertionError("called")

    module.register, module.scored = register, scored
    monkeypatch.setitem(sys.modules, "outside_things", module)
    entries = [importlib.metadata.EntryPoint(name=n, value=v, group="skillduet.things")
               for n, v in (("a", "outside_things:register"), ("b", "outside_things:scored"), ("c", "outside_things"))]
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: entries if group == reg.group else [])
    reg.register("builtin", 0)
    assert reg.peek("called") is None  # registering and peeking load nothing
    assert reg.names() == ["builtin", "called"]

    broken = Registry("thing", "things", group="skillduet.things")
    entries.append(importlib.metadata.EntryPoint(name="d", value="no_such_module_x:f", group="skillduet.things"))
    with pytest.raises(ConfigError, match=r"^entry point d = 'no_such_module_x:f' of group skillduet.things failed "
                                          r"to load \(ModuleNotFoundError: .*\): fix or uninstall"):
        broken.names()


def test_a_broken_entry_point_fails_every_lookup_not_only_the_first(monkeypatch):
    """Discovery that raised leaves a partial registry: later lookups raise the same error instead of using it."""
    import importlib.metadata

    reg = Registry("thing", "things", group="skillduet.things")
    reg.register("builtin", 0)
    entries = [importlib.metadata.EntryPoint(name="d", value="no_such_module_x:f", group="skillduet.things")]
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: entries if group == reg.group else [])
    error = r"^entry point d = 'no_such_module_x:f' of group skillduet.things failed to load"
    for lookup in (reg.names, lambda: reg.get("builtin"), lambda: "builtin" in reg):
        with pytest.raises(ConfigError, match=error):
            lookup()


def test_an_entry_point_naming_a_function_with_defaulted_parameters_is_refused_not_called(monkeypatch):
    """Only a function without parameters is called at discovery; one whose parameters all have defaults (an env
    factory, say) would run, not register: a one-line error naming the entry point."""
    import importlib.metadata
    import types

    module = types.ModuleType("outside_factories")
    calls = []

    def make_lamp(split: str = "train"):
        calls.append(split)

    module.make_lamp = make_lamp
    monkeypatch.setitem(sys.modules, "outside_factories", module)
    reg = Registry("thing", "things", group="skillduet.things")
    entries = [importlib.metadata.EntryPoint(name="lamp", value="outside_factories:make_lamp",
                                             group="skillduet.things")]
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: entries if group == reg.group else [])
    with pytest.raises(ConfigError, match=r"^entry point lamp = 'outside_factories:make_lamp' of group "
                                          r"skillduet.things names a function whose parameters all have defaults"
                                          r", which discovery would call: point it at the module that registers"):
        reg.names()
    assert calls == []
