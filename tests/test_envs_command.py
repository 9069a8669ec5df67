"""``skillduet envs list | show NAME``: what the registries know about an environment, in one place; an unknown
name is one line naming the registered ones."""

from __future__ import annotations

import importlib.metadata
import sys

import pytest

from skillduet_plugin.cli import main
from skillduet_plugin.core.registry import load_entry_points
from skillduet_plugin.envs.registry import ENTRY_POINT_GROUP, ENVS, env_names
from skillduet_plugin.runs.env_defaults import WEBSHOP_RUN_DEFAULTS


def show(name: str, capsys) -> tuple[int, str, str]:
    code = main(["envs", "show", name])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_alfworld_shows_its_task_types_defaults_and_other_layers_parts(capsys):
    code, out, _ = show("alfworld", capsys)
    assert code == 0
    for line in ("alfworld: ALFWorld household tasks", "  provided by: built-in",
                 "  task types: pick, look, clean, heat, cool, pick2", "  default panel: valid_unseen",
                 "  task limit keyword: max_tasks", "  run presets (skillduet train env=alfworld, over the run "
                 "config's defaults): none", "  task_types=auto with a tiny model: pick,look,clean,heat,cool",
                 "  offline analyzer rules: registered (skillduet_plugin.llm.offline_alfworld)",
                 "  reading design (warm_start.design=reading): registered",
                 "  tiny-model corpus: none", "  warm-start expert: skillduet_plugin.envs.alfworld.expert"):
        assert line in out, line


def test_webshop_shows_its_task_type_and_every_preset(capsys):
    code, out, _ = show("webshop", capsys)
    assert code == 0
    for line in ("  task types: webshop", "  default panel: test", "  actions: free text", "  report: score and "
                 "success", f"env=webshop, over the run config's defaults): {len(WEBSHOP_RUN_DEFAULTS)} settings",
                 "  reading design (warm_start.design=reading): none", "  tiny-model corpus: its own"):
        assert line in out, line
    for key, value in WEBSHOP_RUN_DEFAULTS.items():
        assert f"    {key}={'null' if value is None else value}\n" in out, key


def test_an_unknown_name_is_one_line_naming_the_registered_ones(capsys):
    code, out, err = show("alfwrold", capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "env='alfwrold' is invalid" in err
    assert f"registered environments are {', '.join(env_names())}" in err


def test_list_names_every_environment_with_its_provider(capsys):
    assert main(["envs", "list"]) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [r[0] for r in rows] == env_names() and {"alfworld", "toy", "webshop"} <= {r[0] for r in rows}
    assert all(r[1] == "built-in" for r in rows if r[0] in ("alfworld", "toy", "webshop"))


def test_an_entry_point_environment_shows_its_package_and_extras(tmp_path, monkeypatch, capsys):
    """An environment registered while its entry point loads names that entry point as its provider, and its
    ``extras`` are shown; one registered by a plain import says so."""
    (tmp_path / "scratch_lamps.py").write_text(
        "from skillduet_plugin.envs.registry import register_env\n\n\n"
        "@register_env('scratch-lamps', task_types=('lamps',), extras={'maps': 3, 'needs': 'a lamp'})\n"
        "def make(data_dir=None, split='train', **kw):\n"
        "    '''Lamps to light (a scratch environment).'''\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    entry = importlib.metadata.EntryPoint("lamps", "scratch_lamps", ENTRY_POINT_GROUP)
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group=None: [entry] if group == ENTRY_POINT_GROUP
                        else [])
    env_names()  # the built-in ones first, as a run would
    try:
        assert load_entry_points(ENTRY_POINT_GROUP) == ["lamps"]
        code, out, _ = show("scratch-lamps", capsys)
        assert code == 0
        for line in ("scratch-lamps: Lamps to light (a scratch environment).",
                     f"  provided by: entry point lamps = 'scratch_lamps' of group {ENTRY_POINT_GROUP}",
                     "  task types: lamps", "  extras:\n    maps: 3\n    needs: a lamp\n",
                     "  offline analyzer rules: none"):
            assert line in out, line
        ENVS.unregister("scratch-lamps")
        sys.modules.pop("scratch_lamps")
        __import__("scratch_lamps")  # a plain import, no entry point loading
        assert show("scratch-lamps", capsys)[1].splitlines()[1] == \
            "  provided by: module scratch_lamps (no entry point)"
    finally:
        ENVS.unregister("scratch-lamps")
        sys.modules.pop("scratch_lamps", None)


@pytest.mark.parametrize("argv", [["envs"], ["envs", "show"]])
def test_a_missing_action_or_name_is_a_usage_error(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
