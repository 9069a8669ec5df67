"""Rows of the skill bank as Python objects: a stored Global version, and the conversions and query pieces the bank
(``bank.py``) shares between its reads."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict, dataclass, field
from typing import Any

from skillduet_plugin.core.selectors import score_names
from skillduet_plugin.skills.bank_files import row_scores
from skillduet_plugin.skills.sanitize import clean_text
from skillduet_plugin.skills.types import GlobalSkills, Skill


@dataclass
class GlobalVersion:
    """One immutable Global version of a scope, with the consolidation report that produced it."""

    scope: str
    version: int
    step: int
    parent_version: int | None
    items: list[str]
    text: str
    selector: str
    report: dict[str, Any] = field(default_factory=dict)
    created_at: float = 0.0

    def as_global(self) -> GlobalSkills:
        return GlobalSkills(scope=self.scope, version=self.version, text=self.text, items=list(self.items))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def clean(text: Any) -> str:
    # hygiene only (valid UTF-8, no control/bidi characters); word wrapping is the skill sanitiser's policy
    return clean_text(text, wrap=False)


def is_corruption(exc: BaseException) -> bool:
    msg = str(exc).lower()
    return any(k in msg for k in ("malformed", "not a database", "corrupt", "disk i/o"))


def loads(text: str | None, default: Any) -> Any:
    return json.loads(text) if text else default


def step_window(sql: str, since_step: int | None, until_step: int | None) -> tuple[str, list]:
    """Append ``since_step < step <= until_step`` conditions (each optional) to a candidates query."""
    params: list = []
    if since_step is not None:
        sql += " AND step > ?"
        params.append(int(since_step))
    if until_step is not None:
        sql += " AND step <= ?"
        params.append(int(until_step))
    return sql, params


def row_to_skill(r: sqlite3.Row) -> Skill:
    scores = {**dict.fromkeys(score_names()), **row_scores(r)}  # an unscored candidate: every score None
    metadata = loads(r["metadata"], {})
    metadata.update({"n_heldout": r["n_heldout"], "score_note": r["score_note"], "scored_step": r["scored_step"]})
    return Skill(text=r["text"], scope=r["scope"], kind=r["kind"],
                 source_traj_ids=tuple(loads(r["source_traj_ids"], [])),
                 step=r["step"], scores=scores, skill_id=r["skill_id"], metadata=metadata)


def row_to_version(r: sqlite3.Row) -> GlobalVersion:
    return GlobalVersion(scope=r["scope"], version=r["version"], step=r["step"], parent_version=r["parent_version"],
                         items=loads(r["items"], []), text=r["text"], selector=r["selector"],
                         report=loads(r["report"], {}), created_at=r["created_at"])
