"""Sampling from a seeded generator without touching the caller's: torch's global RNG (CPU and every CUDA device)
forked, seeded, and restored on exit. Used where episodes are drawn beside training (the per-step teacher check,
the sampled evaluations) so that training draws what it would draw without them."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator


@contextmanager
def seeded_torch_rng(seed: int) -> Iterator[None]:
    """Inside: torch's global generators seeded with ``seed``; after: their states as before."""
    import torch  # lazy: torch

    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


__all__ = ["seeded_torch_rng"]
