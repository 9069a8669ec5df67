"""The skill lifecycle of one run behind one object: what both trainer adapters call.

INTERFACE SKELETON: signatures are fixed (adapters code against them); bodies are filled in by the skill
lifecycle work (bank, extraction, scoring, consolidation, injection).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from skillduet_plugin.config import SkillDuetConfig
from skillduet_plugin.skills.types import ExtractionResult, GlobalSkills, Skill, Trajectory

# logprob_fn(contexts, responses) -> one float32 tensor of per-token log-probs per response
LogprobFn = Callable[[Sequence[Sequence[int]], Sequence[Sequence[int]]], list[torch.Tensor]]


class SkillLifecycle:
    """Skill bank + analyzer + synthesizer + injector for one run.

    Args:
        config: the method's settings.
        bank_path: SQLite file of the skill bank (created if missing).
        tokenizer: the policy tokenizer (token budgets, teacher/scoring contexts); may be None in tests that
            only need text.
        analyzer / synthesizer: backends (default: built from ``config.analyzer`` / ``config.synthesizer``).
        write: False on non-main processes of a multi-process run (they read the bank, never write it).
    """

    def __init__(self, config: SkillDuetConfig, bank_path: str | Path, *, tokenizer: Any = None,
                 analyzer: Any = None, synthesizer: Any = None, write: bool = True) -> None:
        raise NotImplementedError

    def global_for(self, scope: str) -> GlobalSkills:
        raise NotImplementedError

    def student_messages(self, prompt_messages: list[dict[str, str]], *, task: str,
                         scope: str) -> list[dict[str, str]]:
        raise NotImplementedError

    def teacher_messages(self, prompt_messages: list[dict[str, str]], *, task: str, scope: str,
                         local_skill: Skill) -> list[dict[str, str]]:
        raise NotImplementedError

    def extract(self, trajectories: Sequence[Trajectory], step: int) -> ExtractionResult:
        raise NotImplementedError

    def score(self, skills: Sequence[Skill], trajectories: Sequence[Trajectory],
              logprob_fn: LogprobFn) -> dict[str, dict[str, float | None]]:
        raise NotImplementedError

    def end_step(self, step: int) -> Any:
        raise NotImplementedError

    def snapshot(self, directory: str | Path) -> Path:
        raise NotImplementedError

    def restore(self, directory: str | Path) -> None:
        raise NotImplementedError

    def metrics(self) -> dict[str, float]:
        raise NotImplementedError
