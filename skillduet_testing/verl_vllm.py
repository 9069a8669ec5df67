"""TEST-ONLY: verl's own vLLM rollout (``actor_rollout_ref.rollout.name=vllm``) on a CPU machine, with vLLM's
CPU build serving the rollouts and the teacher/Strength prefills.

verl's ``vLLMReplica`` / ``vLLMHttpServer`` / ``ServerAdapter`` run unchanged; the pieces that assume CUDA are
replaced here, each for one reason:

* the CPU platform (``skillduet_testing.verl_cpu``): its ``is_ipc_supported()`` is False, so verl's
  bucketed weight transfer takes its shared-memory path instead of CUDA IPC and ``torch.cuda`` calls;
* vLLM's CPU linear layers repack their weights after loading, so verl's in-place ``model.load_weights`` sync
  fails; ``skillduet_testing.verl_vllm_server`` runs it inside vLLM's own layerwise reload (the server
  and replica subclasses only name that worker extension);
* ``vLLMReplica.launch_servers`` reads ``get_accelerator_ids()[<platform resource>][0]`` in each training
  worker to set the server's visible devices; Ray lists accelerators only, never ``CPU``, so the worker-side
  :func:`_patch_accelerator_ids` answers ``CPU: ["0"]`` (the value only names a device variable on CPU);
* settings, not code (:data:`VLLM_CPU_OVERRIDES`): ``enable_sleep_mode=False`` (vLLM refuses sleep mode on
  CPU), ``free_cache_engine=False`` (no device memory to hand back), ``tensor_model_parallel_size=1``,
  ``dtype=float32`` (the actor trains in fp32: a bf16 rollout would differ from it by bf16 rounding),
  ``enforce_eager=True`` (no CUDA graphs).

* verl names its weight-sync socket after the Ray job id, the same in every local Ray cluster: a per-run tag
  (``SKILLDUET_VLLM_RUN_TAG``, set by :func:`run`) keeps two runs on one machine apart.

``SKILLDUET_VLLM_SKIP_SYNC_AT=<k>`` makes the weight sync tagged global step ``k`` (the sync after step ``k``, or
the start-up sync of a run resumed from step ``k``) send nothing, a negative control: the next step's
rollout-vs-actor gap then shows the stale (or start-up dummy) weights; the server's weight version still moves on.

Model: vLLM's CPU attention refuses head size 16, so runs use the ``tiny64`` preset of ``runs/tiny_model``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import uuid
from pathlib import Path
from typing import Any, Sequence

from ray.runtime_context import RuntimeContext
from verl.workers.rollout import base as rollout_base
from verl.workers.rollout.replica import RolloutReplicaRegistry

from skillduet_testing import verl_cpu_run as base
from skillduet_testing.verl_cpu import MODULE as PLATFORM_MODULE
from skillduet_testing.verl_cpu import cpu_env
from skillduet_testing.verl_cpu_run import read_metrics
from skillduet_testing.vllm_socket import RUN_TAG_ENV, tagged_zmq_handle
from skillduet_plugin.warmstart.tiny_model import build_tiny

logger = logging.getLogger(__name__)

MODULE = __spec__.name if __spec__ is not None else __name__  # the import name, also under -m
NAME = "vllm"
SKIP_SYNC_ENV = "SKILLDUET_VLLM_SKIP_SYNC_AT"
MODEL_SIZE = "tiny64"

#: verl settings for its vLLM rollout on CPU (see the module doc for why each).
VLLM_CPU_OVERRIDES = [
    f"actor_rollout_ref.rollout.name={NAME}",
    "actor_rollout_ref.rollout.mode=async",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "++actor_rollout_ref.rollout.enable_sleep_mode=False",
    "actor_rollout_ref.rollout.free_cache_engine=False",
    "actor_rollout_ref.rollout.dtype=float32",
    "actor_rollout_ref.rollout.enforce_eager=True",
    "actor_rollout_ref.rollout.max_num_seqs=16",
    "actor_rollout_ref.rollout.max_num_batched_tokens=2048",
    "actor_rollout_ref.rollout.max_model_len=2048",
    # the server actor takes one logical CPU (verl gives it no num_cpus) beside TransferQueue's and the worker's
    "ray_kwargs.ray_init.num_cpus=4",
]

#: vLLM's CPU engine on a small machine: a fixed KV cache (no RAM-fraction probe), no core pinning.
VLLM_CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "VLLM_CPU_CI_ENV": "1",
                "VLLM_NO_USAGE_STATS": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "1"}


def _patch_accelerator_ids() -> None:
    """``RuntimeContext.get_accelerator_ids()`` also answers the CPU platform's resource name (see module doc)."""

    original = getattr(RuntimeContext.get_accelerator_ids, "__wrapped__", None) or RuntimeContext.get_accelerator_ids

    def get_accelerator_ids(self: Any) -> dict[str, list[str]]:
        ids = dict(original(self))
        ids.setdefault("CPU", ["0"])
        return ids

    get_accelerator_ids.__wrapped__ = original
    RuntimeContext.get_accelerator_ids = get_accelerator_ids


def _adapter_class() -> type:
    from verl.workers.rollout.vllm_rollout.vllm_rollout import ServerAdapter  # lazy: imports vllm

    class CPUServerAdapter(ServerAdapter):
        """verl's ``ServerAdapter`` with the negative-control switch and a per-run socket name."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.zmq_handle = tagged_zmq_handle(self.zmq_handle)

        async def update_weights(self, weights: Any, global_steps: int | None = None, **kwargs: Any) -> None:
            skip_at = os.environ.get(SKIP_SYNC_ENV, "")
            if skip_at and global_steps is not None and int(skip_at) == int(global_steps):
                for _ in weights:  # drain: the generator may gather sharded tensors on every rank
                    pass
                print(f"[vllm cpu] {SKIP_SYNC_ENV}={skip_at}: the server keeps its old weights after step "
                      f"{global_steps} (negative control)", flush=True)
                if self._ensure_server_handle():
                    await self.server_handle.set_global_steps.remote(global_steps)
                return None
            return await super().update_weights(weights, global_steps=global_steps, **kwargs)

    return CPUServerAdapter


def __getattr__(name: str) -> Any:
    """``CPUServerAdapter`` is built on first access (verl's registry looks it up by name): it imports vLLM,
    which only the training worker needs, not every process that loads this module."""
    if name == "CPUServerAdapter":
        cls = _adapter_class()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _replica_class() -> type:
    from skillduet_testing.verl_vllm_server import CPUvLLMReplica  # lazy: imports vllm

    return CPUvLLMReplica


def register() -> None:
    """Patch what the CPU platform needs; route verl's ``vllm`` replica (server side) and worker-side adapter
    through the CPU subclasses (verl's own registries)."""

    _patch_accelerator_ids()
    RolloutReplicaRegistry.register(NAME, _replica_class)
    rollout_base._ROLLOUT_REGISTRY[(NAME, "async")] = f"{MODULE}.CPUServerAdapter"


def vllm_env(extra_pythonpath: str | None = None) -> dict[str, str]:
    """Environment variables loading the CPU platform and this module in every verl process, plus vLLM's."""

    env = cpu_env(extra_pythonpath)
    env.pop("CUDA_VISIBLE_DEVICES", None)  # Ray refuses an empty value; the platform needs none
    env["VERL_USE_EXTERNAL_MODULES"] = f"{PLATFORM_MODULE},{MODULE}"
    env["OMP_NUM_THREADS"] = "1"
    env.update(VLLM_CPU_ENV)
    return env


def run(out: str | os.PathLike, *, steps: int = 2, stock: bool = False, save_freq: int = 1,
        metrics: str | None = None, overrides: Sequence[str] = (), extra_env: dict[str, str] | None = None,
        log: str | None = None, timeout: float | None = None, max_train: int = 8) -> int:
    """``testing.verl_cpu_run.run`` with verl's vLLM rollout and the ``tiny64`` model; returns the exit code."""

    out = Path(out).expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    model_dir = str(build_tiny(out / f"{MODEL_SIZE}_model", size=MODEL_SIZE))
    metrics = metrics or str(out / f"metrics_{'stock' if stock else 'skillduet'}.jsonl")
    pythonpath = os.pathsep.join(p for p in [str(base.REPO), os.environ.get("PYTHONPATH", "")] if p)
    env = base.run_env(pythonpath, VERL_FILE_LOGGER_PATH=str(metrics))
    train_file = (base.build_rule_dataset(out) if stock
                  else base.build_env_dataset(out, base.env_of(overrides), env, max_train))
    env.update(vllm_env(pythonpath))
    env[RUN_TAG_ENV] = uuid.uuid4().hex[:12]
    env.update(extra_env or {})
    to_workers = [k for k in (*VLLM_CPU_ENV, SKIP_SYNC_ENV, RUN_TAG_ENV) if env.get(k)]
    ray_env = [f"+ray_kwargs.ray_init.runtime_env.env_vars.{k}={json.dumps(env[k])}" for k in to_workers]
    cmd = base.command(model_dir, train_file, str(out), steps=steps, stock=stock, save_freq=save_freq, env=env,
                       extra=[*VLLM_CPU_OVERRIDES, *ray_env, *overrides])
    return base.launch(cmd, env, out, log=log, timeout=timeout)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m skillduet_testing.verl_vllm --out DIR [--steps N] [--stock] [overrides...]``."""

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder for the model, data, checkpoints and logs")
    parser.add_argument("--steps", type=int, default=2, help="total training steps (default 2)")
    parser.add_argument("--save-freq", type=int, default=1, help="checkpoint every N steps (default 1)")
    parser.add_argument("--stock", action="store_true", help="stock verl (no plugin) on the rule-reward set")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides (they come last and win)")
    args = parser.parse_args(argv)
    out = Path(args.out).expanduser().resolve()
    metrics = out / f"metrics_{'stock' if args.stock else 'skillduet'}.jsonl"
    code = run(out, steps=args.steps, stock=args.stock, save_freq=args.save_freq, metrics=str(metrics),
               overrides=args.overrides)
    print(f"exit code {code}")
    if code == 0 and metrics.is_file():
        for step, m in sorted(read_metrics(metrics).items()):
            print(f"step {step}: rollout-vs-actor max prob gap {m.get('training/rollout_probs_diff_max')}, "
                  f"step time {m.get('timing_s/step', 0.0):.1f} s")
        print(f"checkpoints: {out / 'checkpoints'}\nmetrics (verl's file logger): {metrics}")
    return code


__all__ = ["MODEL_SIZE", "NAME", "SKIP_SYNC_ENV", "VLLM_CPU_ENV", "VLLM_CPU_OVERRIDES", "register",
           "run", "vllm_env"]

register()

if __name__ == "__main__":
    raise SystemExit(main())
