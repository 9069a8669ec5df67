"""CPU kernels pinned to AVX2, so that a CPU run computes the same on any x86-64 CPU that has AVX2.

Torch picks its vectorised CPU kernels by the CPU (``ATEN_CPU_CAPABILITY``: AVX-512 or AVX2) and MKL its code path
by the CPU and its vendor; each rounds differently, so a model trained from scratch on two CPUs diverges in the
last bits within ten optimizer steps and then prints other success rates for the same seed. The ``skillduet``
command sets both to AVX2 (unless the environment already sets them) before torch is imported: on an AVX2 CPU it
changes nothing; an AVX-512 CPU then runs the kernels an AVX2 CPU runs (docs/study.md, "Numbers on other
machines", says what was checked). ``SKILLDUET_CPU_KERNELS=native`` leaves both alone (each CPU's own kernels:
faster on some AVX-512 CPUs, other numbers).
"""

from __future__ import annotations

import os
import platform
from typing import MutableMapping

#: The environment the ``skillduet`` command sets when the user did not.
PINNED = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"}
#: ``SKILLDUET_CPU_KERNELS=native``: pin nothing.
SWITCH = "SKILLDUET_CPU_KERNELS"


def pin_cpu_kernels(environ: MutableMapping[str, str] | None = None, machine: str | None = None) -> dict[str, str]:
    """Set each variable of :data:`PINNED` that ``environ`` (default ``os.environ``) does not set, on x86-64 only
    (other CPUs have neither) and unless ``SKILLDUET_CPU_KERNELS=native``. Effective for torch only before it is
    imported (the CLI calls this first). Returns the values in force."""
    environ = os.environ if environ is None else environ
    if (machine or platform.machine()).lower() not in ("x86_64", "amd64"):
        return {}
    choice = environ.get(SWITCH, "avx2").lower()
    if choice == "native":
        return {}
    if choice != "avx2":
        raise ValueError(f"{SWITCH}={environ[SWITCH]!r} is invalid: expected avx2 (the default) or native")
    for key, value in PINNED.items():
        environ.setdefault(key, value)
    return {key: environ[key] for key in PINNED}


def cpu_kernels() -> str:
    """The CPU kernels torch runs (``torch.backends.cpu.get_cpu_capability()``: AVX2, AVX512, ...)."""
    import torch  # lazy: torch

    return str(torch.backends.cpu.get_cpu_capability())


__all__ = ["PINNED", "SWITCH", "cpu_kernels", "pin_cpu_kernels"]
