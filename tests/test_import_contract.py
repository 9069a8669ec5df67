"""The layering of docs/ARCHITECTURE.md holds (``.importlinter``), and an upward import breaks the contract."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(package_parent: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(package_parent)}
    return subprocess.run([str(LINT), str(ROOT / ".importlinter")], cwd=package_parent, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_package_keeps_its_layers():
    result = _lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "BROKEN" not in result.stdout and result.stdout.count("KEPT") >= 3


def test_an_upward_import_fails_the_contract(tmp_path):
    # negative control: the same check on a copy where core/ imports the run tooling
    shutil.copytree(ROOT / "skillduet_plugin", tmp_path / "skillduet_plugin",
                    ignore=shutil.ignore_patterns("__pycache__"))
    opd = tmp_path / "skillduet_plugin" / "core" / "opd.py"
    opd.write_text(opd.read_text() + "\nfrom skillduet_plugin.runs.config import RunConfig  # noqa: E402,F401\n")
    result = _lint(tmp_path)
    assert result.returncode != 0
    assert "skillduet_plugin.core is not allowed to import skillduet_plugin.runs" in result.stdout
