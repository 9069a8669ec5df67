"""Percentile-bootstrap confidence intervals for panel success over seeds x panel tasks (pure numpy).

A study's outcome for one method is a matrix ``(seeds, tasks)`` of per-episode results (1 = won). Both sources
of noise are resampled: seeds (the runs) and panel tasks (the fixed panel is a sample of the task
distribution). Differences between two methods resample the same seeds and the same tasks in both, because
every method plays the same panel with the same seeds (a paired design: the task difficulty cancels).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class Interval:
    """A point estimate with its percentile-bootstrap interval (``level`` = 0.95 for a 95% interval)."""

    estimate: float
    low: float
    high: float
    level: float = 0.95

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high


def _matrix(values: Sequence[Sequence[float]] | np.ndarray, name: str) -> np.ndarray:
    m = np.asarray(values, dtype=float)
    if m.ndim == 1:
        m = m[None, :]
    if m.ndim != 2 or m.shape[0] == 0 or m.shape[1] == 0:
        raise ValueError(f"{name} has shape {m.shape}: expected a non-empty (seeds, tasks) matrix")
    return m


def bootstrap_interval(a: Sequence[Sequence[float]] | np.ndarray,
                       b: Sequence[Sequence[float]] | np.ndarray | None = None, *, level: float = 0.95,
                       n_boot: int = 10000, seed: int = 0) -> Interval:
    """The mean of ``a`` (or the paired difference mean(a) - mean(b)) with a percentile-bootstrap interval.

    ``a`` and ``b``: ``(seeds, tasks)`` matrices (a 1-D sequence is one seed). Each bootstrap replicate draws
    seeds with replacement and tasks with replacement, the same draw for ``a`` and ``b``. The interval is
    the ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of the replicate statistics (numpy's default
    linear interpolation). Deterministic for a given ``seed``.
    """
    if not 0 < level < 1:
        raise ValueError(f"level={level!r} is invalid: expected a fraction in (0, 1), e.g. 0.95")
    if n_boot < 1:
        raise ValueError(f"n_boot={n_boot!r} is invalid: expected a positive number of replicates")
    ma = _matrix(a, "a")
    mb = None if b is None else _matrix(b, "b")
    if mb is not None and mb.shape != ma.shape:
        raise ValueError(f"a has shape {ma.shape} and b {mb.shape}: a paired difference needs the same seeds "
                         f"and the same panel")
    diff = ma if mb is None else ma - mb
    n_seeds, n_tasks = diff.shape
    rng = np.random.default_rng(seed)
    stats = np.empty(n_boot)
    # Row sums per replicate: draw the seed rows first, then the task columns (chunked to bound memory).
    chunk = max(1, 2_000_000 // (n_seeds * n_tasks))
    for start in range(0, n_boot, chunk):
        k = min(chunk, n_boot - start)
        rows = rng.integers(0, n_seeds, size=(k, n_seeds))
        cols = rng.integers(0, n_tasks, size=(k, n_tasks))
        picked = diff[rows[:, :, None], cols[:, None, :]]  # (k, seeds, tasks)
        stats[start:start + k] = picked.mean(axis=(1, 2))
    lo, hi = np.quantile(stats, [(1 - level) / 2, (1 + level) / 2])
    return Interval(float(diff.mean()), float(lo), float(hi), level)
