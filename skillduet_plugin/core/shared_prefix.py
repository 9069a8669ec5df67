"""A shared-prefix forward: the rows of a batch that begin with the same tokens (the rollouts of one task group
share their whole first prompt, the Global included) are packed into one sequence in which that prefix appears
once, and attention runs per row over the shared prefix plus the row's own tokens.

Layout of the packed sequence, cluster after cluster: the cluster's prefix (``P`` tokens, from its first row), then
each member row's suffix (its tokens ``P .. L-1``, padding included, ``S = L - P`` each). A row that shares no prefix
long enough is a cluster of one whose "prefix" is the whole row. Position ids are the rows' own, so rotary
embeddings see exactly the positions of the padded batch.

Attention over that layout, per cluster: the prefix queries attend causally to the prefix; the suffix queries of
row ``j`` attend to the whole prefix and causally to row ``j``'s suffix, never to another row's suffix. That is the
causal attention of each padded row, so every real token's output equals the plain forward up to the order of
summation; what is saved is the ``(n - 1) * P`` repeated prefix tokens of every layer's projections and MLP, and
their attention, forward and backward. Padding is at the end of a row (right-padded batches only), so a real
token never attends to a padding token in either computation.

Pure torch; the framework glue (a registered attention function, verl's engine) lives in ``integrations``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F

#: rows share a prefix only if it is at least this long: shorter common beginnings (the role line that every
#: prompt starts with) save little and would tie unrelated rows into one cluster
MIN_PREFIX = 64


@dataclass(frozen=True)
class Cluster:
    """Rows (batch indices, in packing order) that share their first ``prefix`` tokens; ``start`` is the offset of
    the cluster's segment in the packed sequence."""

    rows: tuple[int, ...]
    prefix: int
    start: int


@dataclass(frozen=True)
class PrefixLayout:
    """Where each token of a ``(rows, length)`` right-padded batch sits in the packed ``(1, total)`` sequence."""

    clusters: tuple[Cluster, ...]
    rows: int
    length: int
    total: int
    source_row: torch.Tensor   # (total,) batch row of each packed position
    source_col: torch.Tensor   # (total,) column of each packed position
    index: torch.Tensor        # (rows, length) packed position of each batch token

    @property
    def saved(self) -> int:
        """Batch tokens the packed sequence does not repeat: ``rows * length - total``."""
        return self.rows * self.length - self.total

    def pack(self, batch: torch.Tensor) -> torch.Tensor:
        """``(rows, length, ...)`` -> ``(1, total, ...)``: each cluster's prefix once, then each row's suffix."""
        if tuple(batch.shape[:2]) != (self.rows, self.length):
            raise ValueError(f"batch shape {tuple(batch.shape)} does not match the layout ({self.rows}, {self.length})")
        return batch[self.source_row.to(batch.device), self.source_col.to(batch.device)].unsqueeze(0)

    def unpack(self, packed: torch.Tensor) -> torch.Tensor:
        """``(1, total, ...)`` -> ``(rows, length, ...)``: every row reads its cluster's prefix and its own suffix.
        Differentiable: the gradient of a shared prefix position is the sum over the rows that read it."""
        if packed.shape[0] != 1 or packed.shape[1] != self.total:
            raise ValueError(f"packed shape {tuple(packed.shape)} does not match the layout (1, {self.total})")
        return packed[0][self.index.to(packed.device)]


def _common_prefix(a: torch.Tensor, b: torch.Tensor) -> int:
    """Length of the common beginning of two 1-D token tensors (real tokens only: -1 marks padding)."""
    n = min(a.numel(), b.numel())
    differ = (a[:n] != b[:n]) | (a[:n] < 0)
    hits = torch.nonzero(differ)
    return int(hits[0]) if hits.numel() else n


def plan(input_ids: torch.Tensor, attention_mask: torch.Tensor, min_prefix: int = MIN_PREFIX) -> PrefixLayout | None:
    """The packing of a right-padded ``(rows, length)`` batch, or None when no two rows share ``min_prefix`` real
    tokens (nothing to save) or the batch is not right-padded (a real token after padding)."""

    if input_ids.dim() != 2 or attention_mask.shape != input_ids.shape:
        raise ValueError(f"input_ids {tuple(input_ids.shape)} and attention_mask {tuple(attention_mask.shape)} "
                         "must be the same (rows, length)")
    if min_prefix < 1:
        raise ValueError(f"min_prefix={min_prefix} must be >= 1")
    mask = attention_mask.to(torch.bool).cpu()
    rows, length = input_ids.shape
    lengths = mask.sum(dim=1)
    if bool((mask.cumsum(dim=1) != torch.arange(1, length + 1).clamp(max=lengths[:, None])).any()):
        return None  # not right-padded: a padding token before a real one
    ids = torch.where(mask, input_ids.cpu(), torch.full_like(input_ids.cpu(), -1))

    members: list[list[int]] = []
    prefixes: list[int] = []
    for r in range(rows):
        best, best_len = -1, 0
        for c, group in enumerate(members):
            shared = _common_prefix(ids[r], ids[group[0]])
            if shared > best_len:
                best, best_len = c, shared
        if best >= 0 and best_len >= min_prefix:
            members[best].append(r)
            prefixes[best] = min(prefixes[best], best_len)
        else:
            members.append([r])
            prefixes.append(length)
    if all(len(group) == 1 for group in members):
        return None

    clusters, src_row, src_col = [], [], []
    index = torch.empty(rows, length, dtype=torch.long)
    start = 0
    for group, prefix in zip(members, prefixes):
        prefix = length if len(group) == 1 else prefix
        suffix = length - prefix
        clusters.append(Cluster(tuple(group), prefix, start))
        src_row.append(torch.full((prefix,), group[0], dtype=torch.long))
        src_col.append(torch.arange(prefix))
        for j, r in enumerate(group):
            index[r, :prefix] = start + torch.arange(prefix)
            index[r, prefix:] = start + prefix + j * suffix + torch.arange(suffix)
            src_row.append(torch.full((suffix,), r, dtype=torch.long))
            src_col.append(torch.arange(prefix, length))
        start += prefix + len(group) * suffix
    return PrefixLayout(tuple(clusters), rows, length, start, torch.cat(src_row), torch.cat(src_col), index)


def attention(layout: PrefixLayout, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              scale: float | None = None, dropout: float = 0.0) -> torch.Tensor:
    """Attention over a packed sequence: ``query`` ``(1, heads, total, dim)``, ``key``/``value``
    ``(1, kv_heads, total, dim)`` (grouped-query heads allowed) -> ``(1, heads, total, dim)``."""

    if query.shape[0] != 1 or query.shape[2] != layout.total or key.shape[2] != layout.total:
        raise ValueError(f"query {tuple(query.shape)} / key {tuple(key.shape)} do not match the packed length "
                         f"{layout.total}")
    gqa = query.shape[1] != key.shape[1]
    pieces = []
    for cluster in layout.clusters:
        a, p, n = cluster.start, cluster.prefix, len(cluster.rows)
        s = layout.length - p
        q_pre, k_pre, v_pre = (t[:, :, a:a + p] for t in (query, key, value))
        pieces.append(F.scaled_dot_product_attention(q_pre, k_pre, v_pre, is_causal=True, scale=scale,
                                                     dropout_p=dropout, enable_gqa=gqa))
        if s == 0:
            continue
        b = a + p

        def rows_of(t: torch.Tensor) -> torch.Tensor:  # (1, h, n*s, d) -> (n, h, s, d)
            return t[:, :, b:b + n * s].reshape(t.shape[1], n, s, t.shape[3]).transpose(0, 1)

        keys = torch.cat([k_pre.expand(n, -1, -1, -1), rows_of(key)], dim=2)
        values = torch.cat([v_pre.expand(n, -1, -1, -1), rows_of(value)], dim=2)
        allowed = torch.ones(s, p + s, dtype=torch.bool, device=query.device)
        allowed[:, p:] = torch.ones(s, s, dtype=torch.bool, device=query.device).tril()
        out = F.scaled_dot_product_attention(rows_of(query), keys, values, attn_mask=allowed, scale=scale,
                                             dropout_p=dropout, enable_gqa=gqa)      # (n, h, s, d)
        pieces.append(out.transpose(0, 1).reshape(1, query.shape[1], n * s, query.shape[3]))
    return torch.cat(pieces, dim=2)


def group_rows(groups: Sequence[str], ranks: int) -> list[int]:
    """A batch order that keeps verl's split over ``ranks`` data-parallel ranks (each rank's contiguous share
    holds the same rows) and puts the rows of one task group (``groups``: each row's group id) side by side
    within a share, groups in the order they first appear, so that micro-batches hold whole groups: rows
    arrive in the order their rollouts finish, and a group scattered over micro-batches shares nothing."""
    if ranks < 1 or len(groups) % ranks:
        raise ValueError(f"{len(groups)} rows do not split over {ranks} ranks")
    share = len(groups) // ranks
    order: list[int] = []
    for start in range(0, len(groups), share):
        rows = range(start, start + share)
        first = {}
        for r in rows:
            first.setdefault(groups[r], len(first))
        order += sorted(rows, key=lambda r: first[groups[r]])
    return order


__all__ = ["MIN_PREFIX", "Cluster", "PrefixLayout", "attention", "group_rows", "plan"]
