"""Token means of per-token statistics over a logging interval, across micro-batches and processes.

TRL's ``_metrics`` lists are averaged by its ``log``: a statistic appended once per micro-batch becomes a mean of
micro-batch means, which weighs a micro-batch with 2 supervised tokens like one with 200 and moves with how rows
are grouped (``per_device_train_batch_size``, ``gradient_accumulation_steps``), and each process logs only its own
rows. The gate statistics are token means (Eq. 1's ``sum_i M_i x_i / sum_i M_i``), so they are accumulated here as
(weighted sum, tokens) per key, summed over the processes at log time, and handed to TRL's ``log`` as one value:
the token mean over every supervised token of the interval, whichever micro-batch or rank held it. A key with no
supervised token in the interval is not logged (0 would read as "the gate is shut").
"""

from __future__ import annotations

from typing import Any, Iterable

import torch


class TokenMeans:
    """Per mode (``train`` / ``eval``), a (weighted sum, tokens) pair for each of a fixed set of keys. The set is
    fixed at construction so that every process gathers a tensor of the same shape, whichever keys it saw."""

    def __init__(self, keys: Iterable[str]) -> None:
        self.keys = tuple(dict.fromkeys(keys))
        self._index = {k: i for i, k in enumerate(self.keys)}
        self._sums = {mode: torch.zeros(len(self.keys), 2, dtype=torch.float64) for mode in ("train", "eval")}

    def add(self, mode: str, stats: dict[str, float], tokens: float) -> None:
        """Add one micro-batch's token means ``stats`` over its ``tokens`` supervised tokens (keys outside the set
        are an error: they would be lost silently)."""
        unknown = sorted(set(stats) - set(self._index))
        if unknown:
            raise KeyError(f"TokenMeans has no key {unknown[0]!r}: known {list(self.keys)}")
        sums = self._sums[mode]
        for key, value in stats.items():
            sums[self._index[key], 0] += float(value) * float(tokens)
            sums[self._index[key], 1] += float(tokens)

    def flush(self, mode: str, gather: Any = None) -> dict[str, float]:
        """The token means of ``mode`` since the last flush, summed over processes by ``gather`` (e.g.
        ``accelerator.gather``, which concatenates along the first dimension; called on every process, so every
        process must flush together), and reset."""
        sums, self._sums[mode] = self._sums[mode], torch.zeros_like(self._sums[mode])
        if gather is not None:
            sums = gather(sums[None]).reshape(-1, *sums.shape).sum(dim=0)
        return {key: float(sums[i, 0] / sums[i, 1]) for i, key in enumerate(self.keys) if sums[i, 1] > 0}
