"""Scoring's near-duplicate detection does not depend on whether a consolidation ran earlier in the process: a
consolidation loads the embedding similarity lazily (``similarity="auto"``), and scoring used to pick it up from
then on, so a run resumed from a checkpoint (no consolidation yet in its process) planned different paid scoring
rows than the same run uninterrupted (found by ``tests/verl/test_resume_epoch.py``)."""

from __future__ import annotations

from skillduet_plugin.config import SkillDuetConfig
from skillduet_plugin.skills import lifecycle as lifecycle_module
from skillduet_plugin.skills.bank import BANK_FILENAME
from skillduet_plugin.skills.lifecycle import SkillLifecycle

from skills_fakes import FakeBackend


def test_scoring_similarity_is_the_same_before_and_after_a_consolidation_loads_embeddings(tmp_path, monkeypatch,
                                                                                          tiny_tokenizer):
    def embeddings():
        return lambda texts: [[1.0] for _ in texts]

    monkeypatch.setattr(lifecycle_module, "embedding_matrix_fn", embeddings)
    lc = SkillLifecycle(SkillDuetConfig(), tmp_path / BANK_FILENAME, tokenizer=tiny_tokenizer, analyzer=FakeBackend(),
                        synthesizer=FakeBackend(), similarity="auto")
    before = lc._scoring_similarity()
    assert callable(lc._similarity_fn())  # what a consolidation does: the embeddings are loaded now
    assert lc._scoring_similarity() is before is None  # scoring still plans with the lexical similarity
    custom = embeddings()
    configured = SkillLifecycle(SkillDuetConfig(), tmp_path / "other.sqlite", tokenizer=tiny_tokenizer,
                                analyzer=FakeBackend(), synthesizer=FakeBackend(), similarity=custom)
    assert configured._scoring_similarity() is custom  # a caller's own function is used by both
