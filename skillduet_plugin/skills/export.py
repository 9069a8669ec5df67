"""Export a run's skills (every Global version with its consolidation report, and the Local candidates) as JSON
or Markdown, and diff two Global versions."""

from __future__ import annotations

import difflib
import json
from typing import Any

from skillduet_plugin.core.selectors import score_names
from skillduet_plugin.skills.bank import SkillBank


def export_dict(bank: SkillBank, *, scope: str | None = None) -> dict[str, Any]:
    """Plain data of the bank: ``{"scopes": {scope: {"current": ..., "versions": [...]}}, "candidates": [...]}``."""
    scopes = [scope] if scope is not None else bank.scopes()
    out: dict[str, Any] = {"scopes": {}, "candidates": []}
    for sc in scopes:
        versions = bank.history(sc)
        out["scopes"][sc] = {"current": versions[-1].to_dict() if versions else None,
                             "versions": [v.to_dict() for v in versions]}
    out["candidates"] = [s.to_dict() for s in bank.candidates(scope=scope)]
    return out


def export_json(bank: SkillBank, *, scope: str | None = None) -> str:
    return json.dumps(export_dict(bank, scope=scope), indent=2, sort_keys=True, default=str)


def _num(value: Any) -> str:
    return "–" if value is None else f"{float(value):.4g}"


def candidate_score_names(candidates: list[dict[str, Any]] | list[Any]) -> list[str]:
    """The registered scores, then any other score the candidates carry (a selector registered by the run that
    wrote the bank and not by this process)."""
    names = score_names()
    for c in candidates:
        scores = c["scores"] if isinstance(c, dict) else c.scores
        names += [k for k in scores if k not in names]
    return names


def export_markdown(bank: SkillBank, *, scope: str | None = None) -> str:
    """A readable report: per scope the current Global, its version history and the candidates."""
    data = export_dict(bank, scope=scope)
    lines = ["# Skill bank", ""]
    if not data["scopes"]:
        lines.append("_The bank is empty._")
    for sc, entry in data["scopes"].items():
        lines += [f"## Scope `{sc}`", ""]
        current = entry["current"]
        if current is None:
            lines += ["No Global yet.", ""]
        else:
            lines += [f"### Current Global (version {current['version']}, step {current['step']})", ""]
            lines += [f"- {item}" for item in current["items"]] or ["_(empty)_"]
            lines.append("")
            lines += ["### History", "", "| version | step | parent | selector | kept | rejected | items |",
                      "|---|---|---|---|---|---|---|"]
            for v in entry["versions"]:
                rep = v["report"] or {}
                lines.append(f"| {v['version']} | {v['step']} | {v['parent_version'] or '–'} | {v['selector']} | "
                             f"{len(rep.get('kept', []))} | {len(rep.get('rejected', []))} | {len(v['items'])} |")
            lines.append("")
        cands = [c for c in data["candidates"] if c["scope"] == sc]
        if cands:
            names = candidate_score_names(cands)
            lines += ["### Local candidates", "", f"| step | kind | {' | '.join(names)} | skill |",
                      "|---|---|" + "---|" * len(names) + "---|"]
            for c in cands:
                text = " ".join(c["text"].split()).replace("|", "\\|")
                text = text if len(text) <= 120 else text[:117] + "..."
                values = " | ".join(_num(c["scores"].get(n)) for n in names)
                lines.append(f"| {c['step']} | {c['kind']} | {values} | {text} |")
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def diff_versions(bank: SkillBank, scope: str, from_version: int, to_version: int) -> list[str]:
    """Unified diff lines between two Global versions of ``scope`` (items, one per line)."""
    old, new = bank.global_version(scope, from_version), bank.global_version(scope, to_version)
    for v, name in ((old, from_version), (new, to_version)):
        if v is None:
            known = [str(x.version) for x in bank.history(scope)]
            raise ValueError(f"scope {scope!r} has no Global version {name}: known versions are "
                             f"{', '.join(known) or 'none'}")
    return list(difflib.unified_diff([f"- {i}" for i in old.items], [f"- {i}" for i in new.items],
                                     fromfile=f"{scope} v{from_version} (step {old.step})",
                                     tofile=f"{scope} v{to_version} (step {new.step})", lineterm=""))
