"""Near-duplicate detection between skill texts: sentence embeddings when sentence-transformers is installed
(and a model is available offline), otherwise an offline lexical similarity.

The lexical similarity is the larger of token-set Jaccard and character 3-gram cosine, so both reworded
lists of the same steps and the same sentence with small edits count as near-duplicates.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any, Callable, Sequence

from skillduet_plugin.skills.types import normalize_text

_TOKEN = re.compile(r"[a-z0-9]+")
SimilarityFn = Callable[[Sequence[str]], list[list[float]]]


def _tokens(text: str) -> set[str]:
    return set(_TOKEN.findall(normalize_text(text)))


def _ngrams(text: str, n: int = 3) -> Counter:
    t = " " + re.sub(r"\s+", " ", normalize_text(text)) + " "
    return Counter(t[i:i + n] for i in range(max(0, len(t) - n + 1)))


def _jaccard_sets(ta: set[str], tb: set[str]) -> float:
    if not ta and not tb:
        return 1.0
    return len(ta & tb) / len(ta | tb)


def _cosine_counts(ca: Counter, cb: Counter) -> float:
    if len(cb) < len(ca):
        ca, cb = cb, ca
    dot = sum(v * cb.get(k, 0) for k, v in ca.items())
    na = math.sqrt(sum(v * v for v in ca.values()))
    nb = math.sqrt(sum(v * v for v in cb.values()))
    return dot / (na * nb) if na and nb else 0.0


def jaccard(a: str, b: str) -> float:
    return _jaccard_sets(_tokens(a), _tokens(b))


def char_cosine(a: str, b: str) -> float:
    return _cosine_counts(_ngrams(a), _ngrams(b))


def lexical_similarity(a: str, b: str) -> float:
    """Offline similarity in [0, 1]: max of token-set Jaccard and character 3-gram cosine."""
    return max(jaccard(a, b), char_cosine(a, b))


def lexical_matrix(texts: Sequence[str]) -> list[list[float]]:
    """``lexical_similarity`` of every pair; each text's word set and 3-grams are built once, not per pair."""
    n = len(texts)
    words = [_tokens(t) for t in texts]
    grams = [_ngrams(t) for t in texts]
    out = [[1.0] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            out[i][j] = out[j][i] = max(_jaccard_sets(words[i], words[j]), _cosine_counts(grams[i], grams[j]))
    return out


def embedding_matrix_fn(model_name: str = "all-MiniLM-L6-v2") -> SimilarityFn | None:
    """A cosine-similarity function over sentence-transformers embeddings, or None when the package or an
    offline copy of the model is unavailable (the lexical similarity is used then)."""
    try:
        from sentence_transformers import SentenceTransformer  # lazy: sentence_transformers (optional dependency)
    except Exception:  # noqa: BLE001 - any import failure means "not available"
        return None
    try:
        model: Any = SentenceTransformer(model_name)
    except Exception:  # noqa: BLE001 - no offline copy of the model
        return None

    def matrix(texts: Sequence[str]) -> list[list[float]]:
        emb = model.encode(list(texts), normalize_embeddings=True, convert_to_tensor=True)
        return (emb @ emb.T).clamp(-1.0, 1.0).tolist()

    return matrix
