"""``skillduet envs list | show NAME``: the registered environments, and everything known about one.

What an environment is lives in its registration (``envs.registry.EnvSpec``); what other layers keep for it is
registered against its name in their own tables (``skillduet train``'s presets, the offline analyzer's rules, the
reading design's parts, the tiny model's corpus). ``show`` reads them all, so an installed package's environment
is described as fully as a built-in one.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from skillduet_plugin.core.registry import UnknownNameError
from skillduet_plugin.envs.registry import EnvSpec, env_names, env_spec
from skillduet_plugin.llm.offline_common import OFFLINE_RULES
from skillduet_plugin.runs.env_defaults import TINY_TASK_TYPES, run_defaults
from skillduet_plugin.warmstart.reading import READING_ENVS
from skillduet_plugin.warmstart.tiny_model import corpus_spec


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    sub.add_parser("list", help="the registered environments (built-in and installed), one line each")
    show = sub.add_parser("show", help="everything known about one environment")
    show.add_argument("name", help="the environment's registered name (env=NAME)")


def run(args: argparse.Namespace) -> int:
    """List or show; an unknown name is one line on stderr naming the registered ones, and exit code 2."""
    if args.action == "list":
        for name in env_names():
            spec = env_spec(name)
            print(f"{name}\t{spec.provider}\t{spec.description}")
        return 0
    try:
        spec = env_spec(args.name)
    except UnknownNameError as exc:
        print(f"skillduet envs show: {exc}", file=sys.stderr)
        return 2
    print(describe(spec))
    return 0


def describe(spec: EnvSpec) -> str:
    """The text ``skillduet envs show`` prints for ``spec``: one ``label: value`` line per fact."""
    lines = [f"{spec.name}: {spec.description or '(no description)'}",
             f"  provided by: {spec.provider}",
             f"  factory: {spec.target}",
             f"  task types: {', '.join(spec.task_types) or 'not declared'}"]
    lines += [f"  {label}: {value}" for label, value in _registration(spec)]
    preset = run_defaults(spec.name)
    lines.append(f"  run presets (skillduet train env={spec.name}, over the run config's defaults): "
                 + ("none" if not preset else f"{len(preset)} settings"))
    lines += [f"    {key}={_value(value)}" for key, value in preset.items()]
    tiny = TINY_TASK_TYPES.get(spec.name)
    lines.append(f"  task_types=auto with a tiny model: {tiny or 'every task type'}")
    lines += [f"  {label}: {value}" for label, value in _other_layers(spec.name)]
    if spec.extras:
        lines.append("  extras:")
        lines += [f"    {key}: {_value(value)}" for key, value in spec.extras.items()]
    return "\n".join(lines)


def _registration(spec: EnvSpec) -> list[tuple[str, str]]:
    prompts, actions, data, report = spec.prompts, spec.actions, spec.data, spec.report
    if prompts.initial_messages is not None:
        prompt = f"its own builder ({_where(prompts.initial_messages)})"
    else:
        prompt = "the standard prompt with " + ("its own templates" if prompts.templates is not None
                                                else "a neutral role")
    return [
        ("default panel", data.default_panel),
        ("task limit keyword", data.limit_keyword or "none (callers cut env.tasks)"),
        ("data identity when data_dir=None", "declared" if data.default_data_identity else "none"),
        ("prompt", prompt),
        ("observation / action formatting", ", ".join(
            f"{what} by {_where(fn)}" for what, fn in (("observations", prompts.format_observation),
                                                       ("actions", prompts.format_actions)) if fn) or "as given"),
        ("actions", ("free text" if actions.free_text_actions else "one of the admissible actions")
         + (f", parsed by {_where(actions.project_action)}" if actions.project_action else
            ", parsed from <action>...</action>")),
        ("choose-mode factory keywords", _value(dict(actions.choose_kwargs)) if actions.choose_kwargs else "none"),
        ("report", "a column per task type" + (f" ({', '.join(report.scope_order)})" if report.scope_order else "")
         if report.per_type_report else "score and success"),
        ("warm-start expert", _where(spec.make_expert) if spec.make_expert else "none (no warm start)"),
    ]


def _other_layers(name: str) -> list[tuple[str, str]]:
    rules = OFFLINE_RULES.get(name) if name in OFFLINE_RULES else None
    reading = READING_ENVS.get(name) if name in READING_ENVS else None
    corpus = corpus_spec(name)
    return [
        ("offline analyzer rules", f"registered ({getattr(rules.parse_task, '__module__', '?')})" if rules else
         "none (analyzer.kind=offline writes no Local skill for it)"),
        ("reading design (warm_start.design=reading)", "registered" if reading else "none"),
        ("tiny-model corpus", f"its own ({_where(corpus.lines)}, {corpus.vocab_size} tokens)" if corpus else
         "none (a tiny model learns the default corpus)"),
    ]


def _where(fn: Any) -> str:
    return f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', type(fn).__name__)}"


def _value(value: Any) -> str:
    return "null" if value is None else str(value)
