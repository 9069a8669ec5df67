"""``skillduet report RUN_DIR [RUN_DIR ...] [--out FILE]``: a Markdown report with the plots of one run, or
several runs side by side (e.g. SkillDuet vs GRPO vs the Random selector)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories made by `skillduet train`")
    parser.add_argument("--out", default=None,
                        help="Markdown file to write (default: RUN_DIR/report.md for one run, "
                             "./skillduet-report.md for several); images go to <name>_files/ beside it")
    parser.add_argument("--label", action="append", default=None, metavar="NAME",
                        help="name of a run in the report, once per RUN_DIR in the same order")
    parser.add_argument("--window", type=int, default=None,
                        help="moving-average window of the side-by-side curves (default: ~1/10 of the run)")


def run(args: argparse.Namespace) -> int:
    from skillduet_plugin.reporting import build_report

    if args.window is not None and args.window < 1:
        raise SystemExit(f"--window={args.window} must be >= 1")
    path = build_report(args.run_dirs, args.out, labels=args.label, window=args.window)
    print(path)
    return 0
