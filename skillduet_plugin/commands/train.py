"""``skillduet train [CONFIG] [key=value ...] [--output-dir DIR] [--resume RUN_DIR]``: one SkillDuet training run
on TRL, or the continuation of a stopped one.

With no arguments it runs the CPU demo: the tiny model, warm-started by behaviour cloning on generated ALFWorld
games, then SkillDuet RL with the offline analyzer and a consolidation every 3 steps, with success measured on a
fixed panel before and after. The run directory's path is the last line printed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from skillduet_plugin.config import ConfigError
from skillduet_plugin.runs.config import load_run_config, settings_help
from skillduet_plugin.runs.overrides import config_and_overrides


def add_arguments(parser: argparse.ArgumentParser) -> None:

    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = "settings (YAML keys or dotted key=value overrides):\n" + settings_help()
    parser.add_argument("config", nargs="?", default=None,
                        help="YAML run config (default: the CPU demo); examples/ holds several")
    parser.add_argument("overrides", nargs="*", default=[],
                        help="dotted key=value overrides, e.g. steps=12 env=webshop skillduet.keep_ratio=0.25")
    parser.add_argument("--output-dir", default=None, help="run directory (default: runs/<timestamp>-<name>)")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    parser.add_argument("--resume", metavar="RUN_DIR", default=None,
                        help="continue a stopped run from its last checkpoint, with the skill bank of that step "
                             "(its config.yaml is used; key=value overrides still apply)")


def run(args: argparse.Namespace) -> int:

    resume = getattr(args, "resume", None)
    try:
        config_path, overrides = config_and_overrides([args.config, *args.overrides])
        if resume is not None:
            from skillduet_plugin.runs.trl_runner import resume_point  # lazy: imports torch

            if config_path is not None:
                raise ConfigError(f"--resume reads {resume}/config.yaml: drop the config file {config_path!r} "
                                  "(key=value overrides still apply)")
            resume_point(resume)  # a run folder with a complete checkpoint, before any work
            config_path, args.output_dir = str(Path(resume) / "config.yaml"), str(resume)
        config = load_run_config(config_path, overrides, output_dir=args.output_dir)
    except ConfigError as err:
        print(f"skillduet train: {err}", file=sys.stderr)
        return 2
    if args.print_config:

        print(yaml.safe_dump(config.resolved_dict(), sort_keys=False), end="")
        return 0
    from skillduet_plugin.runs.trl_runner import run_training  # lazy: imports torch

    run_dir = run_training(config, resume=resume)
    print(run_dir, flush=True)
    return 0
