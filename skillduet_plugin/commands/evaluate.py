"""``skillduet eval RUN_DIR_OR_MODEL``: the controlled evaluation (no Global / length-matched neutral text /
learned Global) of fixed weights on a fixed panel, printed as a table and saved as JSON and Markdown.

Decoding is greedy, so the numbers are deterministic for given weights, panel and Global.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from skillduet_plugin.config import ConfigError
from skillduet_plugin.core.settings import check
from skillduet_plugin.runs.config import RunConfig, load_run_config, saved_run_config
from skillduet_plugin.runs.evaluate import CONDITIONS, evaluate_panel, format_table
from skillduet_plugin.runs.rundir import CONFIG_FILE, RunDir, write_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", help="a run directory (uses final_model/ and skill_bank.sqlite) or a model folder")
    parser.add_argument("--env", default=None,
                        help="a registered environment (default: the run's; alfworld for a bare model)")
    parser.add_argument("--panel", default=None,
                        help="panel split: valid_unseen | valid_seen (ALFWorld), test (WebShop); default: the run's")
    parser.add_argument("--limit", type=int, default=0, help="first N panel tasks, round-robin over types (0: all)")
    parser.add_argument("--data-dir", default=None, help="benchmark data folder (default: the run's / generated)")
    parser.add_argument("--bank", default=None, help="skill bank to take the learned Global from (default: the run's)")
    parser.add_argument("--conditions", default="none,neutral,learned",
                        help="comma-separated subset of none,neutral,learned")
    parser.add_argument("--max-turns", type=int, default=None, help="turn limit (default: the run's)")
    parser.add_argument("--output-dir", default=None, help="where eval_<panel>.json/.md go (default: <run>/eval)")


def run(args: argparse.Namespace) -> int:

    try:
        return _run(args)
    except (ConfigError, FileNotFoundError) as err:
        print(f"skillduet eval: {err}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:

    from skillduet_plugin.runs.trl_runner import OFFLINE_ENV, load_model, panel, set_threads  # lazy: imports torch

    for key, value in OFFLINE_ENV.items():
        os.environ.setdefault(key, value)
    target = Path(args.target).expanduser()
    out_dir: Path | None = Path(args.output_dir) if args.output_dir else None
    if (target / CONFIG_FILE).is_file():
        run = RunDir.open(target)
        config = saved_run_config(run.config)
        model_dir = run.final_model
        if not (model_dir / "config.json").is_file():
            raise FileNotFoundError(f"{target} has no final_model/: the run did not finish; pass a checkpoint "
                                    f"folder as the target instead")
        bank = Path(args.bank) if args.bank else run.bank
        out_dir = out_dir or run.eval_dir
    elif (target / "config.json").is_file():
        config = load_run_config(None, [f"model={target}", "warm_start.enabled=false"])
        model_dir = target
        bank = Path(args.bank) if args.bank else None
    else:
        raise FileNotFoundError(f"{args.target} is neither a run directory ({CONFIG_FILE}) nor a model folder "
                                f"(config.json)")
    changes = {}
    if args.env:
        changes["env"] = args.env
        if not args.panel:
            changes["eval_panel"] = None
    if args.panel:
        changes["eval_panel"] = args.panel
    if args.data_dir:
        changes["data_dir"] = args.data_dir
    if args.max_turns:
        changes["max_turns"] = args.max_turns
    config = RunConfig.from_dict({**config.to_dict(), **changes})
    conditions = tuple(c.strip() for c in args.conditions.split(",") if c.strip())
    for condition in conditions:
        check("--conditions", condition, choices=CONDITIONS)
    check("--limit", args.limit, kind="int", lo=0, fix="expected 0 (all) or a positive count")

    set_threads(config)
    model, tokenizer = load_model(model_dir, config)
    tasks = panel(config, limit=args.limit)
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    t0 = time.time()
    results = evaluate_panel(model, tokenizer, config, tasks, bank, conditions=conditions, log=log)
    results.update(panel=config.panel, env=config.env, model=str(model_dir), bank=str(bank) if bank else None,
                   max_turns=config.max_turns)
    table = format_table(results, config.env, title=f"{config.env} {config.panel}: {model_dir}")
    print(table, end="")
    if out_dir is not None:
        write_json(out_dir / f"eval_{config.panel}.json", results)
        (out_dir / f"eval_{config.panel}.md").write_text(table)
        print(out_dir / f"eval_{config.panel}.md")
    played = ", ".join(results.get("conditions", {})) or "none"
    log(f"eval finished in {time.time() - t0:.0f} s: {len(tasks)} tasks of {config.panel} under {played}"
        + (f" (skipped: {', '.join(results['skipped'])})" if results.get("skipped") else ""))
    return 0
