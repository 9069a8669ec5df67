"""The ``skillduet`` console script: ``skillduet train | study | eval | skills | score | report | tiny-model | models``.

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
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="skillduet",
        description="SkillDuet: co-evolve an LLM agent and its textual skills during RL (verl / TRL plugin).")
    parser.add_argument("--version", action="version", version=f"skillduet {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:
            _load(module).add_arguments(p)
    return parser


def _load(module: str):
    return importlib.import_module(f"skillduet_plugin.commands.{module}")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    if command not in COMMANDS:
        command = None
    parser = build_parser(command)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    pin_cpu_kernels()  # before any command imports torch: the same arithmetic on every x86-64 CPU with AVX2
    return int(_load(COMMANDS[args.command][0]).run(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
