"""``core.shared_prefix``: the packing plan of a right-padded batch, and attention over it against an independent
per-row causal attention (values and autograd gradients), with a broken layout as the negative control; the row
order that keeps a task group in one micro-batch."""

from __future__ import annotations

import pytest
import torch

from skillduet_plugin.core import shared_prefix as sp


def _batch(prefixes: list[list[int]], suffixes: list[list[int]], length: int):
    rows = [p + s for p, s in zip(prefixes, suffixes)]
    ids = torch.zeros(len(rows), length, dtype=torch.long)
    mask = torch.zeros(len(rows), length, dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, :len(row)] = torch.tensor(row)
        mask[i, :len(row)] = 1
    return ids, mask


def test_plan_groups_rows_by_their_shared_beginning():
    a, b = list(range(100, 180)), list(range(300, 370))       # two prompts of 80 and 70 tokens
    ids, mask = _batch([a, b, a, a], [[1, 2, 3], [4, 5], [6], [1, 2, 9, 9]], length=85)
    layout = sp.plan(ids, mask, min_prefix=64)
    assert [(c.rows, c.prefix) for c in layout.clusters] == [((0, 2, 3), 80), ((1,), 85)]
    # rows 0 and 3 also share [1, 2] after the prompt, row 2 does not: the cluster's prefix is what all share
    assert layout.total == (80 + 3 * 5) + 85 and layout.saved == 4 * 85 - layout.total
    assert torch.equal(layout.unpack(layout.pack(ids)), ids)  # round trip, padding included
    assert torch.equal(layout.pack(ids)[0, :80], torch.tensor(a))


def test_plan_declines_what_it_cannot_pack_or_would_not_save():
    a = list(range(100, 180))
    ids, mask = _batch([a, list(range(200, 280))], [[1], [2]], length=81)
    assert sp.plan(ids, mask, min_prefix=64) is None          # nothing shared
    ids, mask = _batch([a, a], [[1], [2]], length=81)
    assert sp.plan(ids, mask, min_prefix=81) is None          # shared, but shorter than the minimum
    left = mask.flip(1)                                        # left-padded: not this forward's layout
    assert sp.plan(ids.flip(1), left, min_prefix=8) is None
    with pytest.raises(ValueError, match="min_prefix"):
        sp.plan(ids, mask, min_prefix=0)


def _reference(q, k, v, mask, scale):
    """Each padded row on its own: causal SDPA over its real tokens (written without the packing code)."""
    out = torch.zeros_like(q)
    group = q.shape[1] // k.shape[1]
    for r in range(q.shape[0]):
        n = int(mask[r].sum())
        kk = k[r:r + 1, :, :n].repeat_interleave(group, dim=1)
        vv = v[r:r + 1, :, :n].repeat_interleave(group, dim=1)
        scores = (q[r:r + 1, :, :n] @ kk.transpose(-1, -2)) * scale
        scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
        out[r:r + 1, :, :n] = scores.softmax(-1) @ vv
    return out


def _qkv(layout_batch, heads=4, kv_heads=2, dim=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    rows, length = layout_batch
    q = torch.randn(rows, heads, length, dim, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(rows, kv_heads, length, dim, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(rows, kv_heads, length, dim, generator=g, dtype=torch.float64, requires_grad=True)
    return q, k, v


def _packed_attention(layout, q, k, v, scale):
    """Pack per-row q/k/v (the shared prefix taken from the cluster's first row) and unpack the output."""
    def pack(t):  # (rows, h, L, d) -> (1, h, total, d)
        return layout.pack(t.transpose(1, 2)).transpose(1, 2)
    out = sp.attention(layout, pack(q), pack(k), pack(v), scale=scale)
    return layout.unpack(out.transpose(1, 2)).transpose(1, 2)


def test_attention_equals_each_rows_causal_attention_values_and_gradients():
    a, b = list(range(100, 170)), list(range(300, 372))
    ids, mask = _batch([a, a, b, a, b], [[1, 2, 3, 4], [5, 6], [7, 8, 9], [1], [2, 3, 4, 5, 6]], length=77)
    layout = sp.plan(ids, mask, min_prefix=64)
    assert len(layout.clusters) == 2
    scale = 8 ** -0.5
    # rows of a cluster really share their prefix: give them equal q/k/v there (as a model's forward would)
    q, k, v = _qkv((5, 77))
    with torch.no_grad():
        for cluster in layout.clusters:
            first = cluster.rows[0]
            for r in cluster.rows[1:]:
                for t in (q, k, v):
                    t[r, :, :cluster.prefix] = t[first, :, :cluster.prefix]
    real = mask.bool()[:, None, :, None]
    got = _packed_attention(layout, q, k, v, scale)
    want = _reference(q, k, v, mask, scale)
    assert torch.allclose(got.masked_fill(~real, 0), want.masked_fill(~real, 0), atol=1e-12)

    weights = torch.randn(got.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) * real
    grads_got = torch.autograd.grad((got * weights).sum(), (q, k, v))
    grads_want = torch.autograd.grad((want * weights).sum(), (q, k, v))
    # the packed gradient of a shared prefix position lands on the cluster's first row: compare per cluster sums
    for cluster in layout.clusters:
        rows, p = list(cluster.rows), cluster.prefix
        for gg, gw in zip(grads_got, grads_want):
            assert torch.allclose(gg[rows, :, :p].sum(0), gw[rows, :, :p].sum(0), atol=1e-10)
            assert torch.allclose(gg[rows, :, p:], gw[rows, :, p:], atol=1e-10)


def test_a_layout_that_lets_a_row_see_another_rows_tokens_is_caught():
    """Negative control: a cluster whose claimed prefix is longer than what its rows share (so row 1 reads row
    0's tokens as its own) gives other outputs than the reference, far beyond the tolerance above."""
    a = list(range(100, 170))
    ids, mask = _batch([a, a], [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]], length=75)
    good = sp.plan(ids, mask, min_prefix=64)
    assert good.clusters[0].prefix == 70
    bad = sp.plan(ids[[0, 0]], mask, min_prefix=64)          # both rows "are" row 0: prefix 75
    broken = sp.PrefixLayout(bad.clusters, 2, 75, bad.total, bad.source_row, bad.source_col, bad.index)
    q, k, v = _qkv((2, 75))
    with torch.no_grad():
        for t in (q, k, v):
            t[1, :, :70] = t[0, :, :70]
    want = _reference(q, k, v, mask, 0.3)
    assert torch.allclose(_packed_attention(good, q, k, v, 0.3), want, atol=1e-12)
    assert (_packed_attention(broken, q, k, v, 0.3)[1] - want[1]).abs().max() > 1e-3


def test_group_rows_keeps_each_ranks_rows_and_puts_groups_side_by_side():
    order = sp.group_rows(list("abcabcdd"), 1)
    assert order == [0, 3, 1, 4, 2, 5, 6, 7]
    two = sp.group_rows(list("abbaccdc"), 2)
    assert sorted(two[:4]) == [0, 1, 2, 3] and sorted(two[4:]) == [4, 5, 6, 7]  # each rank keeps its rows
    assert [list("abbaccdc")[i] for i in two] == list("aabbcccd")
    with pytest.raises(ValueError, match="ranks"):
        sp.group_rows(list("abc"), 2)
