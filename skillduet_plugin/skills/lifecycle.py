"""The skill lifecycle of one run behind one object: what both trainer adapters call.

Per step: ``student_messages`` (rollout prompts with the Global) -> ``extract`` (Local skills, teacher
assignment) -> ``teacher_messages`` (OPD teacher prompts) -> ``score`` (Strength/Utility/Contrast, cached in the
bank) -> ``end_step`` (every ``consolidation_interval`` steps: a new Global version per scope). ``snapshot`` /
``restore`` go with checkpoints. With ``write=False`` (non-main processes) nothing is ever written to the bank:
``extract``/``score`` still compute and return, ``end_step`` only reloads the Global.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

from skillduet_plugin.config import SkillDuetConfig
from skillduet_plugin.core.conversation import ChatTokenizer
from skillduet_plugin.core.logprobs import LogprobFn
from skillduet_plugin.core.names import scope_key
from skillduet_plugin.llm.base import make_backend
from skillduet_plugin.skills.bank import SkillBank
from skillduet_plugin.skills.consolidate import ConsolidationReport, consolidate_scopes, render_global
from skillduet_plugin.skills.extract import REPLY_MARGIN_TOKENS, ExtractionStats, extract_local
from skillduet_plugin.skills.inject import GLOBAL_HEADER, LOCAL_HEADER, global_messages, insert_sections, skill_section
from skillduet_plugin.skills.lifecycle_metrics import LifecycleMetrics
from skillduet_plugin.skills.render import DEFAULT_RENDER_TOKENS
from skillduet_plugin.skills.sanitize import tokenizer_special_tokens
from skillduet_plugin.skills.scoring import SkillScore, score_skills
from skillduet_plugin.skills.similarity import SimilarityFn, embedding_matrix_fn
from skillduet_plugin.skills.teacher_scoring import (ScoringPlan, plan_scoring, score_from_plan, score_teacher_pass,
                                                     step_tokens)
from skillduet_plugin.skills.tracking import SkillTracker
from skillduet_plugin.skills.types import ExtractionResult, GlobalSkills, Skill, Trajectory

logger = logging.getLogger(__name__)

#: bank meta key holding the lifecycle's metric counters as of the last snapshot
STATE_META_KEY = "lifecycle_state"


#: The scope key of a task under ``config.scope`` (the one table of scope kinds is ``core.names.SCOPE_KEYS``).
resolve_scope = scope_key


class SkillLifecycle(LifecycleMetrics):
    """Skill bank + analyzer + synthesizer + injector for one run.

    Args:
        config: the method's settings.
        bank_path: SQLite file of the skill bank (created if missing).
        tokenizer: the policy tokenizer (token budgets, teacher/scoring contexts); may be None in tests that
            only need text.
        analyzer / synthesizer: backends (default: built from ``config.analyzer`` / ``config.synthesizer``).
        write: False on non-main processes of a multi-process run (they read the bank, never write it).
        env: environment name put in analyzer payloads when a trajectory has no ``metadata["env"]``.
        similarity: near-duplicate similarity; default: sentence-transformers embeddings when installed with
            an offline model, otherwise the lexical similarity.
        chat_template_kwargs: passed to the chat template when building scoring contexts.
    """

    def __init__(self, config: SkillDuetConfig, bank_path: str | Path, *, tokenizer: Any = None,
                 analyzer: Any = None, synthesizer: Any = None, write: bool = True, env: str = "",
                 similarity: SimilarityFn | None | str = "auto", chat_template_kwargs: dict | None = None,
                 render_tokens: int = DEFAULT_RENDER_TOKENS, policy_model: Any = None) -> None:
        if not isinstance(config, SkillDuetConfig):
            raise TypeError(f"config must be a SkillDuetConfig, got {type(config).__name__}")
        self.config = config
        self.tokenizer = tokenizer
        self.write = bool(write)
        self.env = env
        self.render_tokens = int(render_tokens)
        self.bank = SkillBank(bank_path, readonly=not self.write)
        self._analyzer = analyzer
        self._synthesizer = synthesizer
        self._policy_model = policy_model
        self._similarity = similarity
        # scoring's near-duplicates use the caller's function only, never the one a consolidation loads lazily
        # ("auto"), so a step scores alike whether or not a consolidation ran before it in this process (a run
        # resumed from a checkpoint has had none)
        self._scoring_similarity_fn = similarity if callable(similarity) else None
        self._chat_template_kwargs = chat_template_kwargs
        self._chat_tokenizer: Any = None
        self._special_tokens = tokenizer_special_tokens(tokenizer)
        self._global_cache: dict[str, GlobalSkills] = {}
        self._sections: dict[tuple[str, str, int], str] = {}
        self._counters = {"analyzer_requests": 0, "analyzer_failures": 0, "synthesizer_failures": 0, "rejected": 0,
                          "local_extracted": 0, "skipped_validation": 0, "consolidations": 0, "global_fallbacks": 0}
        self._last: dict[str, float] = {}
        self._failure_offset: dict[str, float] = {}
        #: where the skills go besides the bank: the trainer's tracker (set by the adapters; default: nowhere)
        self.tracker: SkillTracker = SkillTracker()

    # ------------------------------------------------------------------ backends (built lazily)
    @property
    def analyzer(self) -> Any:
        if self._analyzer is None:

            self._analyzer = make_backend(self.config.analyzer, role="analyzer", policy_model=self._policy_model,
                                          policy_tokenizer=self.tokenizer)
        return self._analyzer

    @property
    def synthesizer(self) -> Any:
        if self._synthesizer is None:

            self._synthesizer = make_backend(self.config.synthesizer, role="synthesizer",
                                             policy_model=self._policy_model, policy_tokenizer=self.tokenizer)
        return self._synthesizer

    def _similarity_fn(self) -> SimilarityFn | None:
        if self._similarity == "auto":
            self._similarity = embedding_matrix_fn()
        return self._similarity  # type: ignore[return-value]

    # ------------------------------------------------------------------ prompts
    def scope_for(self, *, task_type: str, task_id: str) -> str:
        """The scope key of a task under this run's ``config.scope``."""
        return resolve_scope(self.config.scope, task_type=task_type, task_id=task_id)

    def global_for(self, scope: str) -> GlobalSkills:
        """The Global in force for ``scope`` (cached until the next consolidation or :meth:`reload`)."""
        if scope not in self._global_cache:
            self._global_cache[scope] = self.bank.current_global(scope)
        return self._global_cache[scope]

    def reload(self) -> None:
        """Forget cached Globals so the next reads see the bank's latest committed versions."""
        self._global_cache.clear()

    def _global_text(self, scope: str, global_version: int | None = None) -> str:
        if not self.config.use_global:
            return ""
        g = self.global_for(scope)
        if global_version is not None and global_version != g.version:
            v = self.bank.global_version(scope, global_version)
            g = v.as_global() if v is not None else g
        return g.text

    def _global_section(self, scope: str, global_version: int | None = None) -> str:
        return self._section(GLOBAL_HEADER, self._global_text(scope, global_version), self.config.skill_token_budget)

    def _section(self, header: str, text: str, budget: int) -> str:
        """``inject.skill_section`` memoised: a step's 1,024 teacher prompts share a few Globals and one Local skill
        per task group, and cutting a section to its budget costs tokenizer calls."""
        key = (header, text, budget)
        section = self._sections.get(key)
        if section is None:
            if len(self._sections) >= 4096:
                self._sections.clear()
            section = self._sections[key] = skill_section(header, text, budget, self.tokenizer, self._special_tokens)
        return section

    def student_messages(self, prompt_messages: list[dict[str, str]], *, task: str,
                         scope: str, global_version: int | None = None) -> list[dict[str, str]]:
        """The rollout prompt: ``prompt_messages`` with the Global of ``scope`` (unchanged if ``use_global`` is
        off or the scope has no Global yet). ``global_version`` pins a specific version (default: current)."""
        return global_messages(prompt_messages, self._global_text(scope, global_version), task=task,
                               budget_tokens=self.config.skill_token_budget, position=self.config.skill_position,
                               tokenizer=self.tokenizer, special_tokens=self._special_tokens)

    def teacher_messages(self, prompt_messages: list[dict[str, str]], *, task: str, scope: str,
                         local_skill: Skill, global_version: int | None = None) -> list[dict[str, str]]:
        """The OPD teacher prompt: the student prompt plus ``local_skill`` right after the Global section."""
        local = self._section(LOCAL_HEADER, local_skill.text, self.config.local_skill_token_budget)
        return insert_sections(prompt_messages, [self._global_section(scope, global_version), local], task=task,
                               position=self.config.skill_position)

    # ------------------------------------------------------------------ extraction
    def extract(self, trajectories: Sequence[Trajectory], step: int) -> ExtractionResult:
        """Local skills of this step via one batched analyzer call; stored as candidates (when writing).
        With ``extract_local`` off (plain GRPO) nothing is analysed and the result is empty."""
        if not self.config.extract_local:
            return ExtractionResult()
        return self.record_extraction(*self.analyze(trajectories, step), step)

    def analyze(self, trajectories: Sequence[Trajectory], step: int) -> tuple[ExtractionResult, ExtractionStats]:
        """The analyzer's Local skills for ``trajectories`` without touching the bank or the counters: part of a
        step extracted early (e.g. one rollout group as soon as it is complete). Combine the parts with
        ``skills.extract.merge_extractions`` and hand the whole step to :meth:`record_extraction` once."""
        return extract_local(trajectories, step, self.analyzer, max_chars=self.config.max_skill_chars,
                             special_tokens=self._special_tokens, env=self.env, render_tokens=self.render_tokens,
                             tokenizer=self.tokenizer,
                             reply_tokens=self.config.local_skill_token_budget + REPLY_MARGIN_TOKENS,
                             max_requests=self.config.analyzer_max_requests)

    def record_extraction(self, result: ExtractionResult, stats: ExtractionStats, step: int) -> ExtractionResult:
        """Store a step's Local skills as candidates (when writing) and count them in the step's metrics."""
        if self.write and result.skills:
            self.bank.add_candidates(result.skills, step)
        self._counters["analyzer_requests"] += stats.requests
        self._counters["analyzer_failures"] += stats.failures
        self._counters["rejected"] += stats.rejected
        self._counters["local_extracted"] += stats.skills
        self._counters["skipped_validation"] += stats.skipped.get("validation_split", 0)
        eligible = max(1, stats.trajectories - sum(stats.skipped.values()))
        self._last.update({"skills/step_local_extracted": float(stats.skills),
                           "skills/step_analyzer_requests": float(stats.requests),
                           "skills/step_analyzer_failures": float(stats.failures),
                           "skills/step_analyzer_capped": float(stats.capped),
                           "skills/step_rejected": float(stats.rejected),
                           "skills/assigned_ratio": stats.assigned / eligible})
        self._count_replies(result, stats, step)
        return result

    def add_candidates(self, skills: Sequence[Skill], step: int,
                       scores: dict[str, dict[str, Any]] | None = None) -> int:
        """Store Local skills made elsewhere (e.g. gathered from other ranks, whose lifecycles do not write),
        with their scores if given. Returns the number of new candidates."""
        if not self.write:
            raise PermissionError("add_candidates() on a lifecycle with write=False: only the main process "
                                  "writes the skill bank; gather the skills to it")
        added = self.bank.add_candidates(skills, step)
        if scores:
            self.bank.record_scores({sid: dict(sc, note=sc.get("note")) for sid, sc in scores.items()}, step=step)
        return added

    # ------------------------------------------------------------------ scoring
    def chat_tokenizer(self) -> Any:
        """The ``ChatTokenizer`` over the policy tokenizer that renders scoring contexts."""
        if self._chat_tokenizer is None:
            if self.tokenizer is None:
                raise ValueError("score() needs the policy tokenizer: pass tokenizer= to SkillLifecycle")

            self._chat_tokenizer = ChatTokenizer(self.tokenizer, self._chat_template_kwargs)
        return self._chat_tokenizer

    def _context_ids(self, traj: Trajectory, skill: Skill | None) -> list[int]:
        if not traj.prompt_messages:
            raise ValueError(f"trajectory {traj.traj_id} has no prompt_messages: scoring inserts the skill into "
                             "the first prompt at message level, so adapters must fill Trajectory.prompt_messages")
        if skill is None:
            if traj.prompt_ids:
                return list(traj.prompt_ids)
            msgs = self.student_messages(traj.prompt_messages, task=traj.task, scope=traj.scope,
                                         global_version=traj.global_version)
        else:
            msgs = self.teacher_messages(traj.prompt_messages, task=traj.task, scope=traj.scope, local_skill=skill,
                                         global_version=traj.global_version)
        return self.chat_tokenizer().prompt_ids(msgs)

    def score(self, skills: Sequence[Skill], trajectories: Sequence[Trajectory], logprob_fn: LogprobFn, *,
              teacher_logps: Mapping[str, Any] | None = None,
              assignment: Mapping[str, str] | None = None,
              record: bool = True) -> dict[str, dict[str, float | None]]:
        """Strength/Utility/Contrast of ``skills`` on held-out ``trajectories``, cached on the candidates in the
        bank (when writing and ``record``; ``record=False`` only computes, e.g. to compare two log-prob sources).
        Returns ``{skill_id: {<every registered score>, n_heldout}}`` (``core.selectors.score_names``).

        ``heldout="teacher"``: ``teacher_logps`` (traj_id -> the teacher pass's per-token log-probs) supply the
        free rows, ``assignment`` (traj_id -> teacher skill_id; default ``Trajectory.local_skill_id``) says
        which skill each trajectory was distilled from; rows the caller did not supply and the budgeted extra
        rows go through ONE ``logprob_fn`` call. The pairwise policies: ONE call over every (skill, row) pair.
        """
        if not skills:
            return {}
        if self.config.heldout != "teacher":
            scores = score_skills(skills, trajectories, logprob_fn, self._context_ids, policy=self.config.heldout,
                                  max_heldout=self.config.max_heldout)
            return self.record_scores(skills, trajectories, scores) if record else _plain_scores(scores)
        need_base = [t for t in trajectories if t.base_logps is None and t.split == "train" and t.completion_ids]
        if need_base:  # callers without old log-probs (e.g. the score command): one student forward
            values = logprob_fn([self._context_ids(t, None) for t in need_base],
                                [list(t.completion_ids or []) for t in need_base])
            for t, v in zip(need_base, values):
                t.base_logps = v.detach().float().cpu().tolist()
        scores, plan = score_teacher_pass(
            skills, trajectories, self._assignment(trajectories, assignment), teacher_logps or {}, logprob_fn,
            self._context_ids, budget_tokens=self.scoring_budget_tokens(trajectories),
            max_heldout=self.config.max_heldout, similarity=self._scoring_similarity(),
            dedupe_threshold=self.config.dedupe_threshold)
        return self.record_scores(skills, trajectories, scores, plan) if record else _plain_scores(scores)

    def plan_scores(self, skills: Sequence[Skill], trajectories: Sequence[Trajectory],
                    assignment: Mapping[str, str] | None = None) -> ScoringPlan:
        """``heldout="teacher"`` in two phases (trainers whose base log-probs arrive after the rollout): the
        rows of every candidate; run ``teacher_scoring.paid_logprobs`` with the rollout weights, then
        :meth:`finish_scores` once the teacher and base log-probs are known."""
        return plan_scoring(skills, trajectories, self._assignment(trajectories, assignment),
                            context_fn=self._context_ids, budget_tokens=self.scoring_budget_tokens(trajectories),
                            max_heldout=self.config.max_heldout, similarity=self._scoring_similarity(),
                            dedupe_threshold=self.config.dedupe_threshold)

    def finish_scores(self, skills: Sequence[Skill], trajectories: Sequence[Trajectory], plan: ScoringPlan,
                      teacher_logps: Mapping[str, Any], paid: Mapping[tuple[str, str], torch.Tensor], *,
                      base_logps: Mapping[str, Any] | None = None) -> dict[str, dict[str, float | None]]:
        """Score and record from a :meth:`plan_scores` plan (no forward)."""
        scores = score_from_plan(skills, trajectories, plan, teacher_logps, paid, base_logps=base_logps)
        return self.record_scores(skills, trajectories, scores, plan)

    def scoring_budget_tokens(self, trajectories: Sequence[Trajectory]) -> int:
        """The step's budget of extra scoring tokens: ``scoring_budget`` x its rollout tokens."""
        return int(self.config.scoring_budget * step_tokens(trajectories))

    def _assignment(self, trajectories: Sequence[Trajectory], assignment: Mapping[str, str] | None) -> dict[str, str]:
        if assignment is not None:
            return dict(assignment)
        return {t.traj_id: t.local_skill_id for t in trajectories if t.local_skill_id}

    def _scoring_similarity(self) -> SimilarityFn | None:
        # Near-duplicate detection before scoring uses the lexical similarity unless the caller configured
        # one: loading an embedding model on every step's hot path would cost more than it saves.
        return self._scoring_similarity_fn

    def record_scores(self, skills: Sequence[Skill], trajectories: Sequence[Trajectory],
                      scores: Mapping[str, SkillScore],
                      plan: ScoringPlan | None = None) -> dict[str, dict[str, float | None]]:
        """Cache ``scores`` on the candidates in the bank (when writing) and in the step metrics."""
        if self.write:
            scored_step = max((t.step for t in trajectories), default=None)
            by_step: dict[int, dict[str, dict]] = {}
            for s in skills:  # one transaction per candidate step (normally one per round)
                by_step.setdefault(s.step, {})[s.skill_id] = dict(scores[s.skill_id].as_record(),
                                                                  scored_step=scored_step)
            for step, records in by_step.items():
                self.bank.record_scores(records, step=step)
        strengths = [sc.strength for sc in scores.values() if sc.strength is not None]
        self._last["skills/strength_mean"] = sum(strengths) / len(strengths) if strengths else 0.0
        self._last["skills/strength_max"] = max(strengths, default=0.0)
        self._last["skills/heldout_mean"] = sum(sc.n_heldout for sc in scores.values()) / max(1, len(scores))
        self._last["skills/unscored"] = float(sum(sc.strength is None for sc in scores.values()))
        if plan is not None:
            self._last.update({f"skills/{k}": v for k, v in plan.stats().items()})
        if self.write and skills:  # the main process tells the trainer's tracker (no-op when none is connected)
            self.tracker.on_scores(max(s.step for s in skills), skills, scores, trajectories)
        return _plain_scores(scores)

    # ------------------------------------------------------------------ consolidation
    def end_step(self, step: int) -> list[ConsolidationReport] | None:
        """After the update of ``step``: consolidate every scope with recent candidates when
        ``step % consolidation_interval == 0``; returns the reports (None when it is not a consolidation step,
        or when ``use_global`` is off: the Local-only ablation never builds a Global)."""
        if not self.config.use_global:
            return None
        if not self.write:
            if step % self.config.consolidation_interval == 0:
                self.reload()
            return None
        if step % self.config.consolidation_interval != 0:
            return None
        if self.bank.last_consolidation_step(step) == step:
            # Already consolidated at this step (a resume replaying end_step): the same versions, not new ones.
            return [ConsolidationReport(**dict(v.report, version=v.version)) for v in self.bank.history()
                    if v.step == step]
        last = self.bank.last_consolidation_step(step - 1)
        jobs = [(scope, self.bank.candidates(scope=scope, since_step=last, until_step=step),
                 self.bank.current_global(scope))
                for scope in self.bank.candidate_scopes(since_step=last, until_step=step)]
        reports = consolidate_scopes(jobs, step=step, config=self.config, synthesizer=self.synthesizer,
                                     tokenizer=self.tokenizer, special_tokens=self._special_tokens,
                                     similarity=self._similarity_fn())
        by_scope = {scope: candidates for scope, candidates, _ in jobs}
        previous = {scope: current.text for scope, _, current in jobs}
        versions = self.bank.commit_consolidation(step, [
            {"scope": r.scope, "items": r.items, "text": render_global(r.items), "selector": r.selector,
             "report": r.to_dict()} for r in reports])
        for r, v in zip(reports, versions):
            r.version = v.version
        self.reload()
        self.tracker.on_consolidation(step, reports, by_scope, previous)
        for r in reports:
            logger.info("step %d: Global %s v%s from %d candidates (kept %d, %d items, %d tokens)", step, r.scope,
                        r.version, r.n_candidates, len(r.kept), len(r.items), r.tokens)
        self._counters["consolidations"] += 1
        self._counters["synthesizer_failures"] += sum(r.synthesizer_failures for r in reports)
        self._counters["global_fallbacks"] += sum(r.fallback for r in reports)
        self._last["skills/consolidated_scopes"] = float(len(reports))
        self._last["skills/consolidation_kept"] = float(sum(len(r.kept) for r in reports))
        self._last["skills/consolidation_rejected"] = float(sum(len(r.rejected) for r in reports))
        return reports

    # ------------------------------------------------------------------ checkpoints
    def snapshot(self, directory: str | Path) -> Path:
        """Write the bank as of now into ``directory`` (atomically), with this object's metric counters, so a
        resume reports the same numbers as an uninterrupted run; returns the snapshot file."""
        if self.write:
            self.bank.set_meta(STATE_META_KEY, json.dumps(self._state(), sort_keys=True))
        return self.bank.snapshot(directory)

    def restore(self, directory: str | Path) -> None:
        """Make the bank exactly the snapshot in ``directory`` (readers just reopen the bank), and the metric
        counters those of the snapshot's step."""
        self.bank.restore(directory)
        self.reload()
        saved = self.bank.get_meta(STATE_META_KEY)
        if saved:
            state = json.loads(saved)
            self._counters.update(state.get("counters", {}))
            self._last = dict(state.get("last", {}))
            live = self._backend_failures()
            self._failure_offset = {k: v - live.get(k, 0.0) for k, v in state.get("backend_failures", {}).items()}

    def close(self) -> None:
        self.bank.close()


def _plain_scores(scores: Mapping[str, SkillScore]) -> dict[str, dict[str, float | None]]:
    return {sid: {**sc.values, "n_heldout": float(sc.n_heldout)} for sid, sc in scores.items()}
