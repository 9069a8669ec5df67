"""Near-duplicate search over thousands of skill texts: the lexical similarity of ``skills.similarity`` for every
pair, computed with matrix products instead of a Python loop per pair, with the same values bit for bit.

Both halves of the lexical similarity are dot products of non-negative integer vectors: token-set Jaccard needs
the intersection size (a dot product of 0/1 word vectors) and character 3-gram cosine the dot product of count
vectors; the norms and set sizes are per text. A dot product of integers below 2**24 is exact in float32 whatever
the summation order, and the final divisions are the same float64 operations as the pairwise code, so the
values equal ``lexical_similarity`` exactly.

Vocabularies larger than ``columns`` keep their most frequent features in their own column and add the rest into
hashed buckets. For non-negative vectors a bucketed dot product is an upper bound of the true one, so a pair whose
bound stays under the threshold is certainly under it; a pair whose bound reaches it is recomputed exactly.
Entries under the threshold may therefore hold a bound instead of the value; every entry at or above it is exact,
which is all that threshold decisions (and the reported similarity of a near-duplicate) need.
"""

from __future__ import annotations

import zlib
from collections import Counter
from typing import Iterator, Sequence

import numpy as np

from skillduet_plugin.skills.similarity import _cosine_counts, _jaccard_sets, _ngrams, _tokens

DEFAULT_COLUMNS = 2048
DEFAULT_BUCKETS = 512
DEFAULT_BLOCK = 512
_EXACT_FLOAT32 = 2 ** 24


class _Features:
    """One feature family (words or 3-grams) of every text as a dense matrix, with per-row norms."""

    def __init__(self, counts: Sequence[Counter], columns: int, buckets: int) -> None:
        df: Counter = Counter()
        for c in counts:
            df.update(c.keys())
        vocab = sorted(df, key=lambda k: (-df[k], k))
        if len(vocab) <= columns:
            own, buckets = vocab, 0
        else:
            own = vocab[: columns - buckets]
        col = {k: i for i, k in enumerate(own)}
        width = len(own) + buckets
        squares = [sum(v * v for v in c.values()) for c in counts]
        dtype = np.float32 if max(squares, default=0) < _EXACT_FLOAT32 else np.float64
        self.matrix = np.zeros((len(counts), max(1, width)), dtype=dtype)
        #: rows with a feature outside the own columns: their products with each other are upper bounds
        self.bucketed = np.zeros(len(counts), dtype=bool)
        rows: list[int] = []
        cols: list[int] = []
        values: list[int] = []
        for r, c in enumerate(counts):
            for key, value in c.items():
                j = col.get(key)
                if j is None:
                    j = len(own) + zlib.crc32(key.encode("utf-8", "surrogatepass")) % buckets
                    self.bucketed[r] = True
                rows.append(r)
                cols.append(j)
                values.append(value)
        np.add.at(self.matrix, (np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)),
                  np.asarray(values, dtype=dtype))
        self.squares = np.asarray(squares, dtype=np.float64)

    def dots(self, start: int, stop: int) -> np.ndarray:
        """Dot products of rows ``start:stop`` with rows ``0:stop`` (float64; exact or an upper bound)."""
        return (self.matrix[start:stop] @ self.matrix[:stop].T).astype(np.float64)

    def inexact(self, start: int, stop: int) -> np.ndarray:
        return self.bucketed[start:stop, None] & self.bucketed[None, :stop]


class LexicalIndex:
    """``lexical_similarity`` of many texts, a block of rows at a time (see the module doc)."""

    def __init__(self, texts: Sequence[str], *, columns: int = DEFAULT_COLUMNS,
                 buckets: int = DEFAULT_BUCKETS) -> None:
        if not 0 < buckets < columns:
            raise ValueError(f"buckets={buckets} must be between 1 and columns-1={columns - 1}")
        self.words = [_tokens(t) for t in texts]
        self.grams = [_ngrams(t) for t in texts]
        self._w = _Features([Counter(dict.fromkeys(w, 1)) for w in self.words], columns, buckets)
        self._g = _Features(self.grams, columns, buckets)
        self._sizes = self._w.squares  # a 0/1 vector's squared norm is the set size
        self._norms = np.sqrt(self._g.squares)

    def __len__(self) -> int:
        return len(self.words)

    def block(self, start: int, stop: int, threshold: float) -> np.ndarray:
        """Similarities of texts ``start:stop`` (rows) to texts ``0:stop`` (columns). Every entry at or above
        ``threshold`` is the exact ``lexical_similarity``; entries below it are below it."""
        inter = np.minimum(self._w.dots(start, stop),
                           np.minimum(self._sizes[start:stop, None], self._sizes[None, :stop]))
        union = self._sizes[start:stop, None] + self._sizes[None, :stop] - inter
        with np.errstate(divide="ignore", invalid="ignore"):
            jac = np.where(union == 0, 1.0, inter / union)
            denom = self._norms[start:stop, None] * self._norms[None, :stop]
            cos = np.where(denom == 0, 0.0, self._g.dots(start, stop) / denom)
        sims = np.maximum(jac, cos)
        check = (self._w.inexact(start, stop) | self._g.inexact(start, stop)) & (sims >= threshold)
        for r, c in zip(*np.nonzero(check)):
            i = start + int(r)
            sims[r, c] = max(_jaccard_sets(self.words[i], self.words[c]), _cosine_counts(self.grams[i], self.grams[c]))
        rows = np.arange(stop - start)
        sims[rows, rows + start] = 1.0  # a text with itself, as ``lexical_matrix`` has it (not a rounded cosine)
        return sims


def first_near_duplicates(texts: Sequence[str], threshold: float, *,
                          block: int = DEFAULT_BLOCK) -> Iterator[tuple[int, int | None, float]]:
    """Greedy near-duplicate pass in input order: yields ``(i, j, similarity)`` per text, where ``j`` is the
    earlier *kept* text most similar to text ``i`` (the first one on ties) if that similarity is at least
    ``threshold`` (text ``i`` is then a near-duplicate, not kept), else ``(i, None, 0.0)`` (kept).

    Equal to comparing every text with every kept text before it, in O(n * n) vectorised work and memory of
    ``block`` rows."""
    index = LexicalIndex(texts)
    kept = np.zeros(len(texts), dtype=bool)
    for start in range(0, len(texts), block):
        stop = min(len(texts), start + block)
        sims = index.block(start, stop, threshold)
        for i in range(start, stop):
            row = sims[i - start, :i]
            cand = np.flatnonzero(kept[:i] & (row >= threshold))
            if cand.size:
                j = int(cand[np.argmax(row[cand])])
                yield i, j, float(row[j])
            else:
                kept[i] = True
                yield i, None, 0.0
