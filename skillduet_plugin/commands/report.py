"""``skillduet report RUN_DIR [RUN_DIR ...] [--out FILE]``: the report of one run, or several runs side by side
(e.g. SkillDuet vs GRPO vs the Random selector), as Markdown with PNGs and as one self-contained HTML page."""

from __future__ import annotations

import argparse
import sys
import time

from skillduet_plugin.reporting import build_report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories made by `skillduet train`")
    parser.add_argument("--out", default=None,
                        help="Markdown file to write (default: RUN_DIR/report.md for one run, "
                             "./skillduet-report.md for several); images go to <name>_files/ beside it, the "
                             "HTML page (images inlined) to <name>.html")
    parser.add_argument("--no-html", action="store_true", help="write the Markdown report only")
    parser.add_argument("--label", action="append", default=None, metavar="NAME",
                        help="name of a run in the report, once per RUN_DIR in the same order")
    parser.add_argument("--window", type=int, default=None,
                        help="moving-average window of the side-by-side curves (default: ~1/10 of the run)")


def run(args: argparse.Namespace) -> int:

    if args.window is not None and args.window < 1:
        raise SystemExit(f"--window={args.window} must be >= 1")
    t0 = time.time()
    path = build_report(args.run_dirs, args.out, labels=args.label, window=args.window, html=not args.no_html)
    print(path)
    if not args.no_html:
        print(path.with_suffix(".html"))
    summary = f"report of {len(args.run_dirs)} run(s) in {time.time() - t0:.0f} s"
    if not args.no_html:
        summary += f"; the page is {path.with_suffix('.html').stat().st_size / 1024:.0f} KiB with its images inlined"
    print(summary, file=sys.stderr)
    return 0
