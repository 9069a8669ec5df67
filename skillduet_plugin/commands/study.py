"""``skillduet study [CONFIG] [key=value ...] [--methods ...] [--seeds ...] [--quick] [--output-dir DIR]``: GRPO,
Local-only OPD and SkillDuet (Random / Strength selection, ...) at equal budget from one shared warm-started
model over several seeds, then a Markdown + PNG report. Rerunning the same command (or ``--resume DIR``)
continues a stopped study: finished runs are skipped.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from skillduet_plugin import study
from skillduet_plugin.config import ConfigError
from skillduet_plugin.runs.overrides import config_and_overrides
from skillduet_plugin.study import DEFAULT_ARMS, QUICK_OVERRIDES, QUICK_SEEDS, StudySpec


def add_arguments(parser: argparse.ArgumentParser) -> None:

    parser.add_argument("config", nargs="?", default=None,
                        help="base YAML run config, as for `skillduet train` (default: the CPU demo)")
    parser.add_argument("overrides", nargs="*", default=[],
                        help="dotted key=value overrides of the base config, e.g. env=webshop steps=30")
    parser.add_argument("--methods", default=",".join(DEFAULT_ARMS),
                        help="comma-separated arms: grpo, local_only, random, a selector (e.g. strength) or "
                             "<selector>_keep<ratio>, each optionally +key=value method settings "
                             "(local_only+opd_coef=0); default %(default)s")
    parser.add_argument("--seeds", default=None, help="comma-separated RL seeds (default 0,1,2; --quick: "
                                                      f"{','.join(map(str, QUICK_SEEDS))})")
    parser.add_argument("--quick", action="store_true",
                        help=f"a small first look, not a result: {' '.join(QUICK_OVERRIDES)}, 2 seeds (~16 CPU-minutes "
                             f"with an uncached warm start)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="runs trained at once, each in its own process with the config's thread count (default "
                             "1; numbers are unchanged). Each holds its own update in memory: micro_batch=8 cuts it")
    parser.add_argument("--output-dir", default=None, help="study directory (default: studies/<timestamp>-<env>)")
    parser.add_argument("--resume", metavar="STUDY_DIR", default=None,
                        help="continue a stopped study with its own settings (finished runs are skipped)")
    parser.add_argument("--report-only", action="store_true", help="only (re)write the report of --resume DIR")
    parser.add_argument("--print-plan", action="store_true", help="print the runs and their configs, then exit")


def _spec(args: argparse.Namespace):

    config, overrides = config_and_overrides([args.config, *args.overrides])
    try:
        seeds = ([int(s) for s in args.seeds.split(",") if s.strip()] if args.seeds
                 else list(QUICK_SEEDS if args.quick else (0, 1, 2)))
    except ValueError:
        raise ConfigError(f"--seeds={args.seeds!r} is invalid: expected comma-separated integers, e.g. 0,1,2") from None
    arms = [a.strip() for a in args.methods.split(",") if a.strip()]
    spec = StudySpec(config=config, overrides=overrides, arms=arms, seeds=seeds, quick=bool(args.quick))
    spec.validate()
    return spec


def run(args: argparse.Namespace) -> int:

    try:
        if args.resume:
            if args.config or args.overrides or args.output_dir:
                raise ConfigError("--resume reads the study's own settings: drop the config, overrides and "
                                  "--output-dir")
            root = Path(args.resume)
            spec = study.load_spec(root)
        else:
            spec = _spec(args)
            base = spec.base_config()
            root = Path(args.output_dir or f"studies/{time.strftime('%Y%m%d-%H%M%S')}-{base.env}")
        if args.print_plan:
            base = spec.base_config()
            for r in study.plan(spec):
                cfg = study.run_config(spec, base, study.shared_model_path(root, base), r, study.run_dir(root, r))
                m = cfg.method_config()
                print(f"{r.name}: method={cfg.method} selector={m.selector} opd_coef={m.opd_coef} "
                      f"use_global={m.use_global} extract_local={m.extract_local} keep_ratio={m.keep_ratio} "
                      f"seed={cfg.seed} steps={cfg.steps}")
            return 0
    except (ConfigError, FileNotFoundError) as err:
        print(f"skillduet study: {err}", file=sys.stderr)
        return 2
    from skillduet_plugin.reporting.study_report import build_study_report  # lazy: imports numpy

    if not args.report_only:
        t0 = time.time()
        try:
            study.run_study(root, spec, jobs=args.jobs)
        except ConfigError as err:
            print(f"skillduet study: {err}", file=sys.stderr)
            return 2
        print(f"study finished in {(time.time() - t0) / 60:.1f} min", file=sys.stderr, flush=True)
    report = build_study_report(root)
    print(report.read_text())
    print(report, flush=True)
    return 0
