"""TEST-ONLY: a ``cpu`` platform for verl so its FSDP2 training engine runs on a CPU-only machine (CI).

verl 0.9 registers its FSDP engines for CUDA/NPU platforms only. This module registers a ``cpu`` platform
through verl's own ``PlatformRegistry`` (gloo collectives, string device ``"cpu"``) and makes verl's process
group use plain ``gloo``. Load it in every process with ``VERL_USE_EXTERNAL_MODULES`` (see :func:`cpu_env`),
and run with ``strategy=fsdp2`` and ``attn_implementation=sdpa``. Never use it for training runs.
"""

from __future__ import annotations

import contextlib
import os
import types
from typing import Any, Optional

import torch
import verl.utils.distributed as dist_utils
from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry

MODULE = __name__


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


def _zero(*args: Any, **kwargs: Any) -> int:
    return 0


# What verl asks of ``torch.<device>`` (memory statistics, streams, seeding) on a device-less machine.
cpu_device_module = types.SimpleNamespace(
    is_available=lambda: True, device_count=lambda: 1, current_device=lambda: "cpu", set_device=_noop,
    synchronize=_noop, empty_cache=_noop, manual_seed=_noop, manual_seed_all=_noop, memory_allocated=_zero,
    memory_reserved=_zero, max_memory_allocated=_zero, max_memory_reserved=_zero, reset_peak_memory_stats=_noop,
    mem_get_info=lambda *a, **k: (1 << 34, 1 << 34), get_device_name=lambda *a, **k: "cpu",
    get_rng_state=torch.get_rng_state, set_rng_state=torch.set_rng_state, is_initialized=lambda: True,
    Stream=None, current_stream=lambda *a, **k: None, stream=lambda *a, **k: contextlib.nullcontext(),
    memory=types.SimpleNamespace(_set_allocator_settings=_noop),
)


@PlatformRegistry.register(platform="cpu")
class PlatformCPU(PlatformBase):
    """A CPU 'accelerator': device name ``cpu``, gloo collectives, no memory to manage."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> types.SimpleNamespace:
        return cpu_device_module

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu"

    def current_device(self) -> str:  # verl passes it to .to() and FSDP's device_id: must be the string
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: Optional[int] = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0):
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "SKILLDUET_CPU_VISIBLE_DEVICES"

    @contextlib.contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "CPU"

    def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
        return {}

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None


def _patch_process_group() -> None:
    """verl asks for ``cpu:gloo,<device>:<backend>``, i.e. ``cpu:gloo,cpu:gloo``, which torch rejects."""

    original = getattr(dist_utils.initialize_global_process_group_ray, "__wrapped__", None) or \
        dist_utils.initialize_global_process_group_ray

    def initialize_global_process_group_ray(timeout_second=None, backend=None):
        return original(timeout_second=timeout_second, backend="gloo")

    initialize_global_process_group_ray.__wrapped__ = original
    dist_utils.initialize_global_process_group_ray = initialize_global_process_group_ray
    engine_workers = __import__("sys").modules.get("verl.workers.engine_workers")
    if engine_workers is not None:
        engine_workers.initialize_global_process_group_ray = initialize_global_process_group_ray


def cpu_env(extra_pythonpath: str | None = None) -> dict[str, str]:
    """Environment variables that load this shim in every verl process (put them in Ray's runtime_env)."""
    env = {"VERL_PLATFORM": "cpu", "VERL_ENGINE_DEVICE": "cuda", "VERL_USE_EXTERNAL_MODULES": MODULE,
           "CUDA_VISIBLE_DEVICES": "", "TOKENIZERS_PARALLELISM": "false"}
    if extra_pythonpath:
        env["PYTHONPATH"] = extra_pythonpath
    return env


_patch_process_group()

__all__ = ["MODULE", "PlatformCPU", "cpu_env"]
