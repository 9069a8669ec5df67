"""Every number in the README's result tables is in the committed result files the table names.

A result table is a Markdown table followed (before the next table) by a ``Files: `docs/results/<run>/` `` line;
its numbers (``73.3%``, ``+8.3``, ``-13.3``, ``30.8 min``, ``load 5-7``) must each appear among the run's
``summary.json`` values (fractions as percentages to one decimal, seconds as minutes to one decimal) or in its
``load.txt`` (the load averages, as whole numbers)."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?")


def result_tables(text: str) -> list[tuple[list[str], str]]:
    """``(table lines, results folder)`` for each table followed by its ``Files:`` line."""
    out, table = [], []
    for line in text.splitlines():
        if line.startswith("|"):
            table.append(line)
            continue
        match = re.match(r"Files: `(docs/results/[^`]+)`", line)
        if match and table:
            out.append((table, match.group(1)))
        if line.strip():  # any other text ends the table
            table = []
    return out


def known_numbers(folder: Path) -> set[float]:
    summary = json.loads((folder / "summary.json").read_text())
    known: set[float] = set()

    def walk(x, key=""):
        if isinstance(x, dict):
            for k, v in x.items():
                walk(v, k)
        elif isinstance(x, list):
            for v in x:
                walk(v, key)
        elif isinstance(x, (int, float)) and not isinstance(x, bool):
            known.add(round(100 * x, 1))
            if key.endswith("_s"):
                known.add(round(x / 60, 1))
    walk(summary)
    loads = folder / "load.txt"
    if loads.is_file():
        for avg in re.findall(r"load average: ([\d.]+), ([\d.]+), ([\d.]+)", loads.read_text()):
            known.update(float(int(float(v))) for v in avg)
            known.update(float(int(float(v)) + 1) for v in avg)
    return known


def numbers_of(rows: list[str]) -> list[float]:
    cells = [c for row in rows for c in row.split("|")]
    # "20 unseen games", "15 RL games", "sampled x4" name the workload, not a result
    cells = [re.sub(r"\b\d+ (unseen|RL) games|x\d+|`[^`]*`", "", c) for c in cells]
    return [float(n) for c in cells for n in NUMBER.findall(c)]


def test_every_readme_result_table_is_backed_by_its_files():
    tables = result_tables((ROOT / "README.md").read_text())
    assert len(tables) >= 2  # the two demo tables at least
    for rows, folder in tables:
        path = ROOT / folder
        assert (path / "summary.json").is_file() and (path / "metrics.jsonl").is_file(), folder
        assert (path / "COMMIT").read_text().strip(), folder
        known = known_numbers(path)
        numbers = numbers_of(rows)
        assert numbers, folder
        missing = [n for n in numbers if round(n, 1) not in known]
        assert not missing, f"{folder}: README numbers not in its files: {missing}"


def test_a_number_changed_in_a_table_is_caught():
    """Negative control: one figure of a real table altered is reported missing."""
    rows, folder = result_tables((ROOT / "README.md").read_text())[0]
    known = known_numbers(ROOT / folder)
    altered = [r.replace("81.7%", "84.2%") for r in rows]
    assert any(n not in known for n in numbers_of(altered))
