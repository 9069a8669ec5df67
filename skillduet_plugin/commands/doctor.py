"""``skillduet doctor [CONFIG] [key=value ...] [--verl]``: check a job's setup before it starts.

Reads the same configuration as ``skillduet train`` (a run config file and ``key=value`` overrides) or, with
``--verl``, the Hydra overrides of ``python -m skillduet_plugin.main_ppo``, and checks the framework versions
against the pins, the ``verl.plugins`` entry point in a fresh process, the environment and its data, one real
analyzer request parsed into a skill, the trackers and the skill bank's folder (``runs.doctor``). Prints one line
per check, the fix under each failure; exits 1 when any check fails, 2 on a config error.
"""

from __future__ import annotations

import argparse
import sys

from skillduet_plugin.config import ConfigError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", nargs="?", default=None,
                        help="the run config `skillduet train` would get (omit with --verl)")
    parser.add_argument("overrides", nargs="*", default=[],
                        help="key=value overrides as for `skillduet train` (with --verl: verl's Hydra overrides)")
    parser.add_argument("--verl", action="store_true",
                        help="check the verl job `python -m skillduet_plugin.main_ppo OVERRIDES` would run")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds the analyzer gets to answer its one request (default 60)")


def run(args: argparse.Namespace) -> int:
    from skillduet_plugin.runs.doctor import run_checks, run_target, verl_target  # lazy: thefuzz

    config_path, overrides = args.config, list(args.overrides)
    if config_path is not None and ("=" in config_path or args.verl):
        config_path, overrides = None, [config_path] + overrides
    try:
        target = verl_target(overrides) if args.verl else run_target(config_path, overrides)
    except ConfigError as err:
        print(f"skillduet doctor: {err}", file=sys.stderr)
        return 2
    print(f"skillduet doctor: {'verl' if args.verl else 'skillduet train'} job, env={target.env}, "
          f"analyzer={target.method.analyzer.kind}", flush=True)
    checks = run_checks(target, timeout_s=args.timeout, emit=lambda c: print(c.line(), flush=True))
    failed = [c.name for c in checks if not c.ok]
    print(f"{len(checks) - len(failed)} of {len(checks)} checks passed" +
          (f"; failed: {', '.join(failed)}" if failed else ""), flush=True)
    return 1 if failed else 0
