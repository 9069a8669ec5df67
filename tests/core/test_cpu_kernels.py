"""The CPU kernels the ``skillduet`` command pins (``core.cpu_kernels``): AVX2 on x86-64 unless the user chose."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from skillduet_plugin.core.cpu_kernels import PINNED, pin_cpu_kernels

REPO = Path(__file__).resolve().parents[2]


def test_pins_avx2_unless_set_and_only_on_x86():
    env: dict[str, str] = {}
    assert pin_cpu_kernels(env, machine="x86_64") == PINNED and env == PINNED
    env = {"ATEN_CPU_CAPABILITY": "avx512"}
    assert pin_cpu_kernels(env, machine="AMD64") == {"ATEN_CPU_CAPABILITY": "avx512", "MKL_CBWR": "AVX2"}
    env = {}
    assert pin_cpu_kernels(env, machine="aarch64") == {} and env == {}
    env = {"SKILLDUET_CPU_KERNELS": "native"}
    assert pin_cpu_kernels(env, machine="x86_64") == {} and env == {"SKILLDUET_CPU_KERNELS": "native"}
    with pytest.raises(ValueError, match="SKILLDUET_CPU_KERNELS='avx9' is invalid"):
        pin_cpu_kernels({"SKILLDUET_CPU_KERNELS": "avx9"}, machine="x86_64")


def test_the_command_pins_before_torch_is_imported(tmp_path):
    # a subcommand's run() sees the pinned environment, and torch (imported after) runs those kernels
    code = ("import os, sys; from skillduet_plugin import cli\n"
            "from skillduet_plugin.commands import tiny_model\n"
            "assert 'torch' not in sys.modules\n"
            "def run(args):\n"
            "    import torch\n"
            "    print(os.environ['ATEN_CPU_CAPABILITY'], os.environ['MKL_CBWR'],"
            " torch.backends.cpu.get_cpu_capability())\n"
            "    return 0\n"
            "tiny_model.run = run\n"
            "raise SystemExit(cli.main(['tiny-model', 'unused']))\n")
    env = {k: v for k, v in os.environ.items() if k not in PINNED and k != "SKILLDUET_CPU_KERNELS"}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["avx2", "AVX2", "AVX2"]
