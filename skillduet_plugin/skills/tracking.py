"""The skills in the trainer's own tracker: the bridge the lifecycle calls at scoring and at consolidation.

``SkillTracker`` is the interface (its methods do nothing: the default when no tracker is connected);
``TrackerBridge`` turns the lifecycle's plain data into bounded tables and Markdown texts and hands them to
``TrackerWriter`` objects, which the adapters build around the logger objects their trainer already has
(``skills.tracking_writers``). Per step: the top and bottom Local skills by Strength with their scope and the
trajectory they came from, and the analyzer's rejected replies by reason. Per consolidation and scope: every
candidate kept or rejected with the reason, the new Global's items and its diff against the previous version.
"""

from __future__ import annotations

import difflib
import logging
import math
from typing import Any, Mapping, Protocol, Sequence

from skillduet_plugin.core.selectors import score_names
from skillduet_plugin.skills.types import Skill, Trajectory

logger = logging.getLogger(__name__)

#: tag prefix of everything the bridge logs (TensorBoard's text tab and W&B group by it)
TAG_PREFIX = "skillduet_skills"  # apart from the scalars (skillduet/*): W&B keeps one value per key and step


#: the score the Local skills' table ranks by (the paper's default selector)
RANK_SCORE = "strength"


def _table_scores() -> list[str]:
    return [RANK_SCORE, *(name for name in score_names() if name != RANK_SCORE)]


def local_columns() -> list[str]:
    """The columns of the ranked Local skills: one per registered score (``core.selectors.score_names``), the
    ranking one first."""
    return ["rank", "end", *_table_scores(), "n_heldout", "scope", "kind", "source_trajectory", "source_reward",
            "skill_id", "text"]


CANDIDATE_COLUMNS = ["status", "reason", "strength", "scope", "source_trajectories", "skill_id", "text"]
REJECTED_COLUMNS = ["reason", "replies", "requests"]


class TrackerWriter(Protocol):
    """One tracker backend: a TensorBoard writer, a W&B run, the console."""

    def text(self, tag: str, markdown: str, step: int) -> None: ...

    def table(self, tag: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], step: int) -> None: ...


class SkillTracker:
    """What the lifecycle tells a tracker; this base class ignores everything (no tracker connected)."""

    def on_scores(self, step: int, skills: Sequence[Skill], scores: Mapping[str, Any],
                  trajectories: Sequence[Trajectory]) -> None:
        """The Local skills of ``step`` have their scores (``{skill_id: SkillScore or dict}``)."""

    def on_extraction(self, step: int, rejected: Sequence[tuple[str, str]], accepted: int) -> None:
        """The analyzer's replies of ``step`` were judged: ``rejected`` holds ``(reason, request)`` of each reply
        that gave no Local skill, ``accepted`` counts the others."""

    def on_consolidation(self, step: int, reports: Sequence[Any], candidates: Mapping[str, Sequence[Skill]],
                         previous: Mapping[str, str]) -> None:
        """New Global versions were committed: ``reports`` (``ConsolidationReport``, ``version`` set), the
        candidates each scope was built from, and the previous Global text per scope."""


def _value(score: Any, key: str) -> float | None:
    value = score.get(key) if isinstance(score, Mapping) else getattr(score, key, None)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return float(value)


def _cap(text: str, max_chars: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"


def local_skill_rows(skills: Sequence[Skill], scores: Mapping[str, Any], trajectories: Sequence[Trajectory], *,
                     k: int = 5, max_chars: int = 240) -> list[list[Any]]:
    """The ``k`` best and ``k`` worst Local skills by Strength (unscored ones rank last), one row each
    (:func:`local_columns`); a skill is listed once even when fewer than ``2k`` were scored."""
    by_traj = {t.traj_id: t for t in trajectories}

    def strength(s: Skill) -> float:
        value = _value(scores.get(s.skill_id, s.scores), RANK_SCORE)
        return -math.inf if value is None else value

    ranked = sorted(skills, key=lambda s: (-strength(s), s.skill_id))
    top = list(enumerate(ranked))[:k]
    bottom = [(i, s) for i, s in list(enumerate(ranked))[max(k, len(ranked) - k):]]
    names = _table_scores()
    rows = []
    for end, picked in (("top", top), ("bottom", bottom)):
        for i, s in picked:
            sc = scores.get(s.skill_id, s.scores)
            source = s.source_traj_ids[0] if s.source_traj_ids else ""
            traj = by_traj.get(source)
            rows.append([i + 1, end, *(_num(_value(sc, name)) for name in names), _num(_value(sc, "n_heldout")),
                         s.scope, s.kind, source, "" if traj is None else f"{traj.reward:.3g}", s.skill_id,
                         _cap(s.text, max_chars)])
    return rows


def candidate_rows(report: Any, candidates: Sequence[Skill], *, limit: int = 50,
                   max_chars: int = 240) -> list[list[Any]]:
    """One row per candidate of a consolidation (:data:`CANDIDATE_COLUMNS`): kept ones first, by Strength."""
    reasons = {r["skill_id"]: r for r in report.rejected}
    kept = set(report.kept)
    rows = []
    for s in candidates:
        why = reasons.get(s.skill_id)
        status = "kept" if s.skill_id in kept else "rejected"
        reason = "" if why is None else f"{why.get('reason', '')}: {why.get('detail', '')}"
        rows.append([status, reason, _num(_value(s.scores, "strength")), s.scope,
                     ", ".join(s.source_traj_ids[:3]), s.skill_id, _cap(s.text, max_chars)])
    rows.sort(key=lambda r: (r[0] != "kept", -(float(r[2]) if r[2] else -math.inf), r[5]))
    unique = []
    for row in rows:  # the same candidate text found at two steps is one row
        if not unique or row[5] != unique[-1][5] or row[0] != unique[-1][0]:
            unique.append(row)
    return unique[:limit]


def rejected_rows(rejected: Sequence[tuple[str, str]], accepted: int, *, limit: int = 3) -> list[list[Any]]:
    """One row per reason of a step's rejected analyzer replies (:data:`REJECTED_COLUMNS`), the most frequent
    first, with up to ``limit`` of the requests they answered; ``accepted`` last, so a step that accepted nothing
    shows it."""
    by_reason: dict[str, list[str]] = {}
    for reason, detail in rejected:
        by_reason.setdefault(reason, []).append(detail)
    ordered = sorted(by_reason.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    rows: list[list[Any]] = [[reason, len(details), "; ".join(details[:limit]) + (" ..." * (len(details) > limit))]
                             for reason, details in ordered]
    return rows + [["(accepted)", int(accepted), ""]]


def global_diff(previous: str, new: str, *, old_name: str = "previous", new_name: str = "new") -> str:
    """Unified line diff of two Global texts ("(no change)" when equal)."""
    lines = list(difflib.unified_diff(previous.splitlines(), new.splitlines(), fromfile=old_name, tofile=new_name,
                                      lineterm=""))
    return "\n".join(lines) if lines else "(no change)"


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-style Markdown table (what TensorBoard's text tab renders)."""
    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def global_markdown(report: Any, previous: str) -> str:
    """The new Global of one scope as Markdown: header, items, the kept candidates it was built from, the diff."""
    new_text = "\n".join(f"- {item}" for item in report.items)
    old = f"v{report.parent_version}" if report.parent_version is not None else "(none)"
    diff = global_diff(previous, new_text, old_name=old, new_name=f"v{report.version}")
    parts = [f"**Global `{report.scope}` v{report.version}** (step {report.step}, selector {report.selector}, "
             f"{len(report.items)} items, {report.tokens}/{report.budget_tokens} tokens, "
             f"{len(report.kept)} kept of {report.n_candidates} candidates)", "",
             new_text or "(empty)", "",
             "Built from: " + (", ".join(f"`{sid}`" for sid in report.kept) or "(no new candidate)"), "",
             f"Diff {old} -> v{report.version}:", "",
             "\n".join("    " + line for line in diff.splitlines())]  # indented: a code block in Markdown
    if report.notes:
        parts += ["", "Notes: " + ", ".join(report.notes)]
    return "\n".join(parts)


class TrackerBridge(SkillTracker):
    """Sends the skills to ``writers``; a writer that fails is logged and never stops training.

    Args:
        writers: the tracker backends (built by the adapters from their trainer's logger objects).
        k: Local skills shown at each end of the Strength ranking per step.
        max_chars: a skill's text is cut to this many characters in tables.
    """

    def __init__(self, writers: Sequence[TrackerWriter], *, k: int = 5, max_chars: int = 240) -> None:
        self.writers = list(writers)
        self.k = int(k)
        self.max_chars = int(max_chars)

    def _emit(self, kind: str, tag: str, step: int, *payload: Any) -> None:
        for writer in self.writers:
            try:
                getattr(writer, kind)(tag, *payload, step)
            except Exception:  # a tracker problem must not cost a training step
                logger.warning("skillduet: tracker %s failed on %s", type(writer).__name__, tag, exc_info=True)

    def on_scores(self, step: int, skills: Sequence[Skill], scores: Mapping[str, Any],
                  trajectories: Sequence[Trajectory]) -> None:
        if not skills:
            return
        rows = local_skill_rows(skills, scores, trajectories, k=self.k, max_chars=self.max_chars)
        self._emit("table", f"{TAG_PREFIX}/local_ranked", step, local_columns(), rows)

    def on_extraction(self, step: int, rejected: Sequence[tuple[str, str]], accepted: int) -> None:
        if rejected:
            self._emit("table", f"{TAG_PREFIX}/analyzer_rejected", step, REJECTED_COLUMNS,
                       rejected_rows(rejected, accepted))

    def on_consolidation(self, step: int, reports: Sequence[Any], candidates: Mapping[str, Sequence[Skill]],
                         previous: Mapping[str, str]) -> None:
        for report in reports:
            scope = report.scope
            self._emit("text", f"{TAG_PREFIX}/global/{scope}", step, global_markdown(report, previous.get(scope, "")))
            rows = candidate_rows(report, candidates.get(scope, ()), max_chars=self.max_chars)
            self._emit("table", f"{TAG_PREFIX}/consolidation/{scope}", step, CANDIDATE_COLUMNS, rows)


__all__ = ["CANDIDATE_COLUMNS", "REJECTED_COLUMNS", "SkillTracker", "TAG_PREFIX", "TrackerBridge", "TrackerWriter",
           "candidate_rows", "global_diff", "global_markdown", "local_columns", "local_skill_rows", "markdown_table",
           "rejected_rows"]
