"""``skillduet skills show|history|diff|export RUN_DIR``: inspect a run's skill bank (read-only)."""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from skillduet_plugin.skills.bank import BANK_FILENAME, BankError, SkillBank
from skillduet_plugin.skills.budget import count_tokens
from skillduet_plugin.skills.export import candidate_score_names, diff_versions, export_json, export_markdown
from skillduet_plugin.skills.lifecycle_metrics import REPLIES_META_KEY


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    show = sub.add_parser("show", help="the current Global of every scope (or one scope)")
    show.add_argument("run_dir", help="run folder holding skill_bank.sqlite (or the .sqlite file itself)")
    show.add_argument("--scope", default=None, help="only this scope")
    show.add_argument("--candidates", type=int, default=10, metavar="N",
                      help="the newest N Local candidates of each scope with every selector's score (0: none)")
    hist = sub.add_parser("history", help="every Global version: step, parent, selector, kept/rejected")
    hist.add_argument("run_dir")
    hist.add_argument("--scope", default=None)
    diff = sub.add_parser("diff", help="what changed between two Global versions of a scope")
    diff.add_argument("run_dir")
    diff.add_argument("--from", dest="from_version", type=int, required=True, help="older version number")
    diff.add_argument("--to", dest="to_version", type=int, required=True, help="newer version number")
    diff.add_argument("--scope", default=None, help="required when the bank has more than one scope")
    export = sub.add_parser("export", help="the whole bank as JSON or Markdown")
    export.add_argument("run_dir")
    export.add_argument("--format", choices=("json", "md"), default="md")
    export.add_argument("--out", default=None, help="write to this file instead of standard output")
    export.add_argument("--scope", default=None)


def open_bank(run_dir: str):
    """The bank of a run folder (or a bank file), read-only; :class:`BankError` when absent or unusable."""

    path = Path(run_dir)
    if path.is_dir():
        path = path / BANK_FILENAME
    if not path.is_file():
        raise BankError(f"no skill bank at {path} (a run folder holds {BANK_FILENAME}): pass a run folder or "
                        "a .sqlite bank file")
    return SkillBank(path, readonly=True)


def _console():
    try:

        console = Console()
        # Piped output (files, tests, CI logs) gets room for the whole table instead of 80 folded columns.
        return console if console.is_terminal else Console(width=200)
    except ImportError:  # rich is a dependency; keep plain output working anyway
        return None


def _table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    console = _console()
    if console is not None:

        # the title on its own line: a rich table title wraps to the table's width (a 2-column table folded a
        # one-line title into five)
        console.print(title, highlight=False, soft_wrap=True)
        table = Table()
        for c in columns:
            table.add_column(c, overflow="fold")
        for r in rows:
            table.add_row(*r)
        console.print(table)
        return
    print(title)
    print("\t".join(columns))
    for r in rows:
        print("\t".join(r))


def _show_replies(bank) -> None:
    """The analyzer's replies so far: answered, accepted, and rejected by the judge's reason (``skills.judge``)."""
    saved = bank.get_meta(REPLIES_META_KEY)
    if not saved:
        return
    counts = json.loads(saved)
    rejected = counts.get("rejected", {})
    rows = [["accepted", str(counts.get("accepted", 0))]]
    rows += [[f"rejected: {reason}", str(n)] for reason, n in sorted(rejected.items(), key=lambda kv: (-kv[1], kv[0]))]
    title = (f"Analyzer replies ({counts.get('answered', 0)} answered; steps with every reply rejected, "
             f"so no Local skill and no OPD term: {counts.get('all_rejected_steps', 0)})")
    _table(title, ["verdict", "replies"], rows)


def _show(bank, scope: str | None, newest: int = 10) -> int:
    _show_replies(bank)
    scopes = [scope] if scope else bank.scopes()
    if not scopes:
        print("The skill bank is empty.")
        return 0

    rows = []
    for sc in scopes:
        g = bank.current_global(sc)
        n_cands = len(bank.candidates(scope=sc))
        rows.append([sc, "–" if g.version is None else str(g.version), str(len(g.items)),
                     str(count_tokens(g.text)), str(n_cands)])
    _table("Current Global per scope", ["scope", "version", "items", "words", "candidates"], rows)
    for sc in scopes:
        g = bank.current_global(sc)
        if g.version is None:
            continue
        print(f"\n[{sc}] Global version {g.version}:")
        for item in g.items:
            print(f"  - {item}")
    if newest > 0:
        _show_candidates(bank, scopes, newest)
    return 0


def _show_candidates(bank, scopes: list[str], newest: int) -> None:
    """The newest candidates of each scope with their cached scores (one column per registered selector score)."""

    picked = [c for sc in scopes for c in bank.candidates(scope=sc)[-newest:]]
    if not picked:
        return
    names = candidate_score_names(picked)
    rows = [[c.scope, str(c.step), c.kind, *("–" if c.scores.get(n) is None else f"{c.scores[n]:.4g}" for n in names),
             " ".join(c.text.split())[:80]] for c in picked]
    print()
    _table(f"Local candidates (newest {newest} per scope)", ["scope", "step", "kind", *names, "skill"], rows)


def _history(bank, scope: str | None) -> int:
    versions = bank.history(scope)
    if not versions:
        print("No Global versions yet.")
        return 0
    rows = []
    for v in versions:
        rep = v.report or {}
        rows.append([v.scope, str(v.version), str(v.step), "–" if v.parent_version is None else str(v.parent_version),
                     v.selector, str(rep.get("n_candidates", "–")), str(len(rep.get("kept", []))),
                     str(len(rep.get("rejected", []))), str(len(v.items)), str(rep.get("synthesizer_failures", 0)),
                     str(len(rep.get("dropped_items", []))), str(len(rep.get("judged_out", [])))])
    _table("Global versions", ["scope", "version", "step", "parent", "selector", "candidates", "kept", "rejected",
                               "items", "synth. failures", "dropped", "judged out"], rows)
    return 0


def _diff(bank, scope: str | None, a: int, b: int) -> int:

    scopes = [scope] if scope else sorted({v.scope for v in bank.history()})
    if len(scopes) > 1:
        print(f"skillduet skills diff: the bank has several scopes ({', '.join(scopes)}); pick one with --scope",
              file=sys.stderr)
        return 2
    if not scopes:
        print("No Global versions yet.", file=sys.stderr)
        return 2
    try:
        lines = diff_versions(bank, scopes[0], a, b)
    except ValueError as exc:
        print(f"skillduet skills diff: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines) if lines else f"versions {a} and {b} of {scopes[0]} have the same items")
    return 0


def _export(bank, fmt: str, out: str | None, scope: str | None) -> int:

    text = export_json(bank, scope=scope) if fmt == "json" else export_markdown(bank, scope=scope)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
        print(f"wrote {out}")
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


def run(args: argparse.Namespace) -> int:
    """Run one action; a bad or missing bank file is one line on stderr and exit code 2, never a traceback."""

    try:
        return _run(args)
    except (BankError, sqlite3.DatabaseError, UnicodeError, ValueError) as exc:
        print(f"skillduet skills {args.action}: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    bank = open_bank(args.run_dir)
    try:
        if args.action == "show":
            return _show(bank, args.scope, args.candidates)
        if args.action == "history":
            return _history(bank, args.scope)
        if args.action == "diff":
            return _diff(bank, args.scope, args.from_version, args.to_version)
        return _export(bank, args.format, args.out, args.scope)
    finally:
        bank.close()
