"""Every number in the README's result tables is in the committed result files the table names, cell by cell.

A result table is a Markdown table followed (before the next table) by a ``Files: `docs/results/<run>/` `` line.
Each body row is named by its first cell (:data:`ROWS`), and its numbers, in order, must be the values at the
listed ``summary.json`` paths (fractions as percentages to one decimal): a swapped or borrowed cell fails. The
header's numbers (``30.8 min``, ``load 5-7``) must appear among the run's values (seconds as minutes to one
decimal) or in its ``load.txt`` (the load averages, as whole numbers)."""

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


_DIFF = ("estimate", "low", "high")
_TEACHER_LEAD = "teacher.greedy.teacher_before - student_before.estimate"
#: a body row's first cell (its start) -> the summary.json paths of its numbers, in the order the row prints them
ROWS = {
    "15 RL games, sampled": ["training_tasks.sampled.success_before", "training_tasks.sampled.success_after",
                             *(f"training_tasks.sampled.difference.{k}" for k in _DIFF)],
    "15 RL games, greedy": ["training_tasks.success_before", "training_tasks.success_after",
                            *(f"training_tasks.difference.{k}" for k in _DIFF)],
    "the teacher on them": ["teacher.greedy.teacher_before", "teacher.greedy.teacher_after", _TEACHER_LEAD],
    "20 unseen games": ["success_before", "success_after", "success_after_with_global",
                        *(f"panel.difference.{k}" for k in _DIFF)],
}


def value_at(summary: dict, path: str) -> float:
    """A ``summary.json`` value by its dotted path (a key may itself hold dots and spaces: the longest matching
    key is taken), as a percentage to one decimal."""
    node, rest = summary, path
    while rest:
        key = max((k for k in node if rest == k or rest.startswith(k + ".")), key=len)
        node, rest = node[key], rest[len(key) + 1:]
    return round(100 * float(node), 1)


def row_mismatches(rows: list[str], summary: dict) -> list[str]:
    """Body rows whose numbers are not, in order, the values of their paths (or are not named in ROWS)."""
    out = []
    for row in rows[2:]:  # the header and the |---| line excluded
        label = row.split("|")[1].strip()
        paths = next((v for k, v in ROWS.items() if label.startswith(k)), None)
        numbers = numbers_of(["|".join(row.split("|")[2:])])
        if paths is None or not 2 <= len(numbers) <= len(paths):
            out.append(f"{label!r}: no paths for this row, or {len(numbers)} numbers")
            continue
        want = [value_at(summary, p) for p in paths[:len(numbers)]]
        if [round(n, 1) for n in numbers] != want:
            out.append(f"{label!r}: {numbers} != {want} ({paths[:len(numbers)]})")
    return out


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
        header = numbers_of(rows[:1])
        missing = [n for n in header if round(n, 1) not in known]
        assert not missing, f"{folder}: README header numbers not in its files: {missing}"
        assert len(rows) >= 4, folder
        mismatches = row_mismatches(rows, json.loads((path / "summary.json").read_text()))
        assert not mismatches, f"{folder}: " + "; ".join(mismatches)


def test_a_number_changed_or_swapped_in_a_table_is_caught():
    """Negative controls on the first real table: one figure altered, and two figures of the file swapped between
    cells (each still somewhere in summary.json, which a check by membership alone let pass)."""
    rows, folder = result_tables((ROOT / "README.md").read_text())[0]
    summary = json.loads((ROOT / folder / "summary.json").read_text())
    assert not row_mismatches(rows, summary)
    altered = [r.replace("81.7%", "84.2%") for r in rows]
    assert row_mismatches(altered, summary)
    swapped = [r.replace("| 73.3% | 86.7% |", "| 86.7% | 73.3% |") for r in rows]
    assert swapped != rows and row_mismatches(swapped, summary)
