"""The wheel holds the product only: ``skillduet_plugin`` with its YAML and prompt files, never the test support."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory) -> list[str]:
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "setup.cfg", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for name in ("skillduet_plugin", "skillduet_testing"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(out), str(src)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (wheel,) = out.glob("skillduet-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        return zf.namelist()


def test_the_wheel_holds_the_package_and_not_the_test_support(wheel_names):
    tops = {n.split("/", 1)[0] for n in wheel_names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert tops == {"skillduet_plugin"}, tops
    assert "skillduet_plugin/verl_config/skillduet_trainer.yaml" in wheel_names
    assert not [n for n in wheel_names if "testing" in n.split("/")[1:2]]
