"""The ``skillduet`` console script: ``skillduet train | study | eval | skills | score | report | tiny-model | models |
doctor | envs``.

Each subcommand lives in ``skillduet_plugin/commands/<name>.py`` with ``add_arguments(parser)`` and
``run(args) -> int``; only the chosen one is imported, so ``skillduet --help`` is instant.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

from skillduet_plugin import __version__
from skillduet_plugin.core.cpu_kernels import pin_cpu_kernels

# subcommand -> (module under skillduet_plugin.commands, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("train", "run SkillDuet training (no arguments: the complete CPU demo)"),
    "study": ("study", "GRPO vs Local-only vs SkillDuet (Random / Strength) at equal budget over seeds, with a report"),
    "eval": ("evaluate", "evaluate a run or model on a fixed panel: no Global / neutral text / learned Global"),
    "skills": ("skills", "inspect a run's skill bank: show, history, diff, export"),
    "score": ("score", "score skill texts with Strength/Utility/Contrast against a run's trajectories"),
    "report": ("report", "write a Markdown report with plots for one or several runs"),
    "tiny-model": ("tiny_model", "build the tiny offline tokenizer + Qwen3 model into a folder"),
    "models": ("models", "prepare real models available offline (e.g. SmolLM2-135M-Instruct)"),
    "doctor": ("doctor", "check a job's setup before it starts: versions, verl plugin, env, analyzer, trackers, bank"),
    "envs": ("envs", "list the registered environments, or show everything known about one"),
}


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser: ``--version``, ``--help`` and the list of subcommands."""
    parser = argparse.ArgumentParser(
        prog="skillduet",
        description="SkillDuet: co-evolve an LLM agent and its textual skills during RL (verl / TRL plugin).")
    parser.add_argument("--version", action="version", version=f"skillduet {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, description=help_text)
    return parser


def command_parser(command: str) -> argparse.ArgumentParser:
    """The parser of one subcommand (its module is imported here, and only here)."""
    module, help_text = COMMANDS[command]
    parser = argparse.ArgumentParser(prog=f"skillduet {command}", description=help_text)
    _load(module).add_arguments(parser)
    return parser


def _load(module: str):
    return importlib.import_module(f"skillduet_plugin.commands.{module}")


def parse(argv: Sequence[str]) -> argparse.Namespace | None:
    """``argv`` as the chosen subcommand's arguments (None: no subcommand given).

    Options and positionals may come in any order (``train CONFIG --output-dir D k=v`` and
    ``train --output-dir D CONFIG k=v`` alike): argparse's intermixed parsing, except for a command with
    subcommands of its own (``skills show``), which argparse parses only in order."""
    argv = list(argv)
    at = next((i for i, a in enumerate(argv) if not a.startswith("-")), None)
    if at is None or argv[at] not in COMMANDS:
        build_parser().parse_args(argv)  # --help, --version, or the error naming an unknown command
        return None
    if at:
        build_parser().parse_args(argv[:at])  # options before the command: --help / --version / an error
    command, rest = argv[at], argv[at + 1:]
    parser = command_parser(command)
    try:
        args = parser.parse_intermixed_args(rest)
    except TypeError:  # argparse refuses intermixed parsing for subparsers
        args = parser.parse_args(rest)
    args.command = command
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args is None:
        build_parser().print_help()
        return 0
    pin_cpu_kernels()  # before any command imports torch: the same arithmetic on every x86-64 CPU with AVX2
    return int(_load(COMMANDS[args.command][0]).run(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
