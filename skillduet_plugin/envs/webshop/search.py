"""A compact BM25 product search standing in for WebShop's Lucene index (no Java needed).

Analysis follows a simple Lucene English analyzer: lowercase, split on non-alphanumerics, drop Lucene's 33
English stopwords and possessive ``'s``, then light plural stemming (Harman's S-stemmer) where Lucene uses
Porter. Scoring is Lucene's BM25 with Anserini's defaults (k1=0.9, b=0.4); repeated query terms add up, only
documents sharing a term are returned and ties keep catalogue order. Rankings are close to, not identical with,
the benchmark's Lucene ones.
"""

from __future__ import annotations

import math
import re
from collections import Counter

STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these "
    "they this to was will with".split()
)
_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def stem(token: str) -> str:
    """Possessive removal plus the S-stemmer (``ies -> y``, ``es -> e``, ``s -> ''``)."""
    if token.endswith("'s"):
        token = token[:-2]
    token = token.replace("'", "")
    if len(token) > 3 and token.endswith("ies") and not token.endswith(("eies", "aies")):
        return token[:-3] + "y"
    if len(token) > 3 and token.endswith("es") and not token.endswith(("aes", "ees", "oes")):
        return token[:-1]
    if len(token) > 2 and token.endswith("s") and not token.endswith(("us", "ss")):
        return token[:-1]
    return token


def analyze(text: str) -> list[str]:
    """Index/query terms of ``text``."""
    return [stem(t) for t in _TOKEN.findall(text.lower()) if t not in STOPWORDS]


class BM25Index:
    """Inverted index over documents given in catalogue order; ``search`` returns document positions."""

    def __init__(self, documents: list[str], k1: float = 0.9, b: float = 0.4) -> None:
        self.k1, self.b = k1, b
        self.postings: dict[str, list[tuple[int, int]]] = {}
        self.lengths: list[int] = []
        for doc_id, text in enumerate(documents):
            terms = analyze(text)
            self.lengths.append(len(terms))
            for term, tf in Counter(terms).items():
                self.postings.setdefault(term, []).append((doc_id, tf))
        self.num_docs = len(documents)
        self.avg_length = (sum(self.lengths) / self.num_docs) if self.num_docs else 0.0

    def idf(self, term: str) -> float:
        df = len(self.postings.get(term, ()))
        return math.log(1 + (self.num_docs - df + 0.5) / (df + 0.5))

    def scores(self, query: str) -> dict[int, float]:
        """BM25 score of every document that shares a term with ``query``."""
        scores: dict[int, float] = {}
        k1, b, avg = self.k1, self.b, self.avg_length or 1.0
        for term in analyze(query):
            postings = self.postings.get(term)
            if not postings:
                continue
            idf = self.idf(term)
            for doc_id, tf in postings:
                norm = k1 * (1 - b + b * self.lengths[doc_id] / avg)
                scores[doc_id] = scores.get(doc_id, 0.0) + idf * tf * (k1 + 1) / (tf + norm)
        return scores

    def search(self, query: str, k: int = 50) -> list[int]:
        """Positions of the top-``k`` documents, best first."""
        scores = self.scores(query)
        return sorted(scores, key=lambda d: (-scores[d], d))[:k]
