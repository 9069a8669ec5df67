"""``skillduet train``: placeholder until the TRL adapter lands (replaced by the TRL integration)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", nargs="?", help="YAML config (default: the CPU demo)")
    parser.add_argument("overrides", nargs="*", help="key=value overrides")
    parser.add_argument("--output-dir", default=None)


def run(args: argparse.Namespace) -> int:
    print("skillduet train: the CPU demo is not available in this build yet.")
    return 2
