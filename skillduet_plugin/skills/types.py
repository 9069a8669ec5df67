"""The skill lifecycle's data model: on-policy trajectories and the skills extracted from them.

Plain dataclasses, JSON-serialisable, shared by the skill bank, extraction, scoring, consolidation and both
trainer adapters.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from dataclasses import asdict, dataclass, field
from typing import Any

from skillduet_plugin.core.settings import check

SKILL_KINDS = ("shared", "procedure", "correction", "global")


def normalize_text(text: str) -> str:
    """Canonical form used for fingerprints: NFKC, lower case, collapsed whitespace, no trailing punctuation."""
    text = unicodedata.normalize("NFKC", text).lower()
    text = re.sub(r"\s+", " ", text).strip()
    return text.rstrip(" .;:")


def skill_fingerprint(text: str, scope: str) -> str:
    """Deterministic id of a skill: sha256 over sorted JSON of its normalised text and scope (16 hex chars)."""
    payload = json.dumps({"scope": scope, "text": normalize_text(text)}, sort_keys=True, ensure_ascii=True)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


@dataclass
class Trajectory:
    """One on-policy episode of the policy in a text environment.

    Attributes:
        traj_id: unique id (stable across processes, e.g. ``"<step>-<task>-<k>"``).
        task_id: the environment task (ALFWorld game path, WebShop goal index).
        scope: what a Global serves for this task (by default the task type).
        task: the task instruction text.
        messages: the whole chat, student view: system/user turns (observations) and assistant turns.
        prompt_messages: the messages that formed the first prompt (before the first assistant turn),
            *without* any skill text, so a teacher or scoring context can insert a skill at message level.
        responses: the policy's response text per turn.
        reward: episode reward; success: whether the task was won.
        advantage: trajectory-mean training advantage (for the Utility score).
        split: ``"train"`` or ``"val"``; validation trajectories never produce training candidates.
        step: training step the trajectory was collected at.
        prompt_ids / completion_ids / completion_mask: the token view used for training; the mask is 1 on
            policy tokens and 0 on environment tokens.
        base_logps: per completion token, log p(y | student prompt) under the rollout weights (old log-probs).
        local_skill_id: the Local skill serving as this trajectory's teacher context, if any.
        global_version: the Global version that was in the prompt.
        order_id: what orders trajectories wherever an order decides something (a group's members, ties in the
            analyzer's pair, a capped held-out set); empty means ``traj_id``. An adapter whose ``traj_id`` holds a
            per-run random part (verl's prompt uid) sets one without it, so that a resumed run scores the same
            rows as the uninterrupted one.
    """

    traj_id: str
    task_id: str
    scope: str
    task: str = ""
    messages: list[dict[str, str]] = field(default_factory=list)
    prompt_messages: list[dict[str, str]] = field(default_factory=list)
    responses: list[str] = field(default_factory=list)
    reward: float = 0.0
    success: bool = False
    advantage: float = 0.0
    split: str = "train"
    step: int = 0
    prompt_ids: list[int] | None = None
    completion_ids: list[int] | None = None
    completion_mask: list[int] | None = None
    base_logps: list[float] | None = None
    local_skill_id: str | None = None
    global_version: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    order_id: str = ""

    @property
    def group_key(self) -> str:
        """Trajectories of one task at one step form a rollout group."""
        return f"{self.step}:{self.task_id}"

    @property
    def order_key(self) -> tuple[str, str]:
        """Sort key wherever an order decides something: ``order_id`` (or ``traj_id``), then ``traj_id``."""
        return (self.order_id or self.traj_id, self.traj_id)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Trajectory":
        return cls(**data)


@dataclass
class Skill:
    """A textual skill: a Local candidate (``shared``/``procedure``/``correction``) or a Global item.

    ``skill_id`` is :func:`skill_fingerprint` of text and scope, so the same advice found twice is one skill.
    ``scores`` caches selector scores (``strength``, ``utility``, ``contrast``) computed when it was made.
    """

    text: str
    scope: str
    kind: str
    source_traj_ids: tuple[str, ...] = ()
    step: int = 0
    scores: dict[str, float | None] = field(default_factory=dict)
    skill_id: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check("Skill.kind", self.kind, choices=SKILL_KINDS)
        self.source_traj_ids = tuple(self.source_traj_ids)
        if not self.skill_id:
            self.skill_id = skill_fingerprint(self.text, self.scope)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["source_traj_ids"] = list(self.source_traj_ids)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Skill":
        return cls(**data)


@dataclass
class GlobalSkills:
    """The Global in force for one scope: version number (None before the first consolidation) and text."""

    scope: str
    version: int | None
    text: str
    items: list[str] = field(default_factory=list)


@dataclass
class ExtractionResult:
    """Local skills of one step. ``assignment[traj_id]`` is the skill_id of that trajectory's teacher context
    (absent: no usable skill, so no OPD term for it). ``failures`` counts analyzer requests that failed after
    retries; ``rejected`` lists ``(reason, detail)`` of outputs rejected by sanitisation."""

    skills: list[Skill] = field(default_factory=list)
    assignment: dict[str, str] = field(default_factory=dict)
    failures: int = 0
    rejected: list[tuple[str, str]] = field(default_factory=list)

    def skill_for(self, traj_id: str) -> Skill | None:
        sid = self.assignment.get(traj_id)
        if sid is None:
            return None
        return next((s for s in self.skills if s.skill_id == sid), None)
