"""Worker processes that compute the warm start's per-episode cloning gradients in parallel.

Each worker (a spawned process with its own torch thread count) loads the model's architecture from the model
folder once and receives the episodes once; every step the parent sends the flat parameters and which episodes
of the batch each worker computes, and gets back one :func:`warmstart.loss.episode_gradient` per episode. The
parent sums them in batch order, so the trained weights do not depend on how many workers there are or which
worker computed which episode (``tests/runs/test_warmstart.py`` checks 1 and 2 workers give identical weights).
A worker that fails or dies stops the warm start with its error; nothing half-trained is cached (the warm start
is built beside its cache folder and renamed into place only when complete).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import traceback
from typing import Any, Sequence


def flat_parameters(model: Any):
    """The model's parameters as one float32 vector, in ``model.parameters()`` order."""
    import torch  # lazy: torch

    return torch.cat([p.detach().reshape(-1).float() for p in model.parameters()])


#: Below this many cloning steps ``warm_start.workers: 0`` clones in the run's own process: starting the workers
#: (importing torch and transformers, loading the model) takes ~6 s, about what 40 steps of the demo save.
POOL_MIN_STEPS = 50


def default_workers(threads: int, batch_size: int) -> int:
    """Cloning processes for a CPU with ``threads`` torch threads per process: as many as the cores hold
    (at least 1, at most one per episode of a batch)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(batch_size, cores // max(1, threads)))


def _worker_main(conn: Any, model_dir: str, episodes: Sequence[Any], threads: int, pad_token_id: int) -> None:
    try:
        # In the spawned worker: torch, transformers and the loss (which imports torch) load here, not when the
        # warm start imports this module.
        import torch  # lazy: torch
        from transformers import AutoModelForCausalLM  # lazy: transformers

        from skillduet_plugin.warmstart.loss import episode_gradient  # lazy: imports torch

        torch.set_num_threads(threads)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        model.train()
        params = list(model.parameters())
        size = sum(p.numel() for p in params)
        buffer = bytearray(size * 4)
        conn.send(("ready", size))
    except BaseException:  # noqa: BLE001 - reported to the parent, which raises it
        conn.send(("error", traceback.format_exc()))
        return
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):  # the parent is gone
            return
        if message[0] == "stop":
            return
        try:
            _, count, assigned = message
            conn.recv_bytes_into(buffer)
            with torch.no_grad():
                torch.nn.utils.vector_to_parameters(torch.frombuffer(buffer, dtype=torch.float32), params)
            losses, grads = [], []
            for position, index in assigned:
                nll, grad = episode_gradient(model, episodes[index], count, pad_token_id)
                losses.append((position, nll))
                grads.append(grad)
            conn.send(("ok", losses))
            conn.send_bytes(torch.cat(grads).numpy().tobytes())
        except BaseException:  # noqa: BLE001
            conn.send(("error", traceback.format_exc()))
            return


class ClonePool:
    """``workers`` spawned processes computing episode gradients; use as ``pool.gradients(...)``, then ``close()``."""

    def __init__(self, model_dir: Any, episodes: Sequence[Any], *, workers: int, threads: int,
                 pad_token_id: int = 0) -> None:
        ctx = mp.get_context("spawn")
        self._episodes = episodes
        self._conns: list[Any] = []
        self._procs: list[Any] = []
        try:
            for _ in range(workers):
                parent, child = ctx.Pipe()
                proc = ctx.Process(target=_worker_main, daemon=True, name="skillduet-clone",
                                   args=(child, str(model_dir), list(episodes), threads, pad_token_id))
                proc.start()
                child.close()
                self._conns.append(parent)
                self._procs.append(proc)
            self.size = None
            for w in range(workers):
                kind, value = self._receive(w)
                if self.size is not None and value != self.size:
                    raise RuntimeError(f"cloning workers loaded models of {self.size} and {value} parameters "
                                       f"from {model_dir}")
                self.size = value
        except BaseException:
            self.close()
            raise

    def _receive(self, w: int) -> tuple[str, Any]:
        try:
            kind, value = self._conns[w].recv()
        except (EOFError, OSError):
            self._procs[w].join(timeout=5)
            raise RuntimeError(f"cloning worker {w} exited (exit code {self._procs[w].exitcode}); set "
                               f"warm_start.workers=1 to clone in the main process") from None
        if kind == "error":
            raise RuntimeError(f"cloning worker {w} failed:\n{value}")
        return kind, value

    def gradients(self, flat_params: Any, indices: Sequence[int], count: int) -> list[tuple[float, Any]]:
        """``[(nll, grad)]`` of ``episodes[i]`` for ``i`` in ``indices`` (in that order), at ``flat_params``."""
        import torch  # lazy: torch

        if flat_params.numel() != self.size:
            raise ValueError(f"the model has {flat_params.numel()} parameters but the workers loaded {self.size}")
        loads = [0] * len(self._conns)
        assigned: list[list[tuple[int, int]]] = [[] for _ in self._conns]
        by_length = sorted(range(len(indices)), key=lambda k: -len(self._episodes[indices[k]].tokens))
        for k in by_length:  # longest first, each to the least loaded worker
            w = loads.index(min(loads))
            assigned[w].append((k, indices[k]))
            loads[w] += len(self._episodes[indices[k]].tokens)
        payload = flat_params.contiguous().numpy().tobytes()
        busy = [w for w in range(len(self._conns)) if assigned[w]]
        for w in busy:
            self._conns[w].send(("step", count, assigned[w]))
            self._conns[w].send_bytes(payload)
        results: list[tuple[float, Any] | None] = [None] * len(indices)
        for w in busy:
            _, losses = self._receive(w)
            grads = torch.frombuffer(bytearray(self._conns[w].recv_bytes()), dtype=torch.float32)
            grads = grads.view(len(losses), self.size)
            for row, (position, nll) in enumerate(losses):
                results[position] = (nll, grads[row])
        return results  # type: ignore[return-value]

    def close(self) -> None:
        for conn in self._conns:
            try:
                conn.send(("stop",))
            except (OSError, ValueError):
                pass
        for proc in self._procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
                proc.join()
        for conn in self._conns:
            conn.close()
        self._conns, self._procs = [], []
