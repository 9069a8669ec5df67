"""The report's skill sections, read from a run's skill bank: every Global version with its diff against the
previous one, and the Local candidates ranked by Strength with what consolidation did with each."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from skillduet_plugin.skills.bank import SkillBank
from skillduet_plugin.skills.tracking import global_diff, markdown_table

RANKED_TOP = 10
RANKED_BOTTOM = 5
MAX_TEXT = 160


def _read_bank(bank_path: Path) -> tuple[list[Any], list[Any]]:

    if not bank_path.exists():
        return [], []
    bank = SkillBank(bank_path, readonly=True)
    try:
        return bank.history(), bank.candidates()
    finally:
        bank.close()


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def global_versions_section(bank_path: Path, level: str) -> list[str]:
    """Markdown: per Global version (oldest first), its items as a code block and the diff to its parent."""
    versions, _ = _read_bank(bank_path)
    lines = [f"{level}# Global versions", ""]
    if not versions:
        return lines + ["No Global version in the skill bank.", ""]
    texts: dict[tuple[str, int], str] = {(v.scope, v.version): v.text for v in versions}
    for v in versions:
        parent = texts.get((v.scope, v.parent_version), "") if v.parent_version is not None else ""
        old = f"v{v.parent_version}" if v.parent_version is not None else "(none)"
        kept = len(v.report.get("kept", [])) if isinstance(v.report, dict) else 0
        lines += [f"**`{v.scope}` v{v.version}** (step {v.step}, selector {v.selector}, {len(v.items)} items, "
                  f"{kept} candidates kept)", "", "```text", v.text or "(empty)", "```", ""]
        if v.parent_version is None:
            lines += ["The first version of this scope.", ""]
        else:
            lines += [f"Diff {old} -> v{v.version}:", "", "```diff",
                      global_diff(parent, v.text, old_name=old, new_name=f"v{v.version}"), "```", ""]
    return lines


def _fates(versions: list[Any]) -> dict[str, str]:
    """skill_id -> what the latest consolidation that saw it did: ``kept (step s)`` or ``<reason> (step s)``."""
    fate: dict[str, str] = {}
    for v in versions:
        report = v.report if isinstance(v.report, dict) else {}
        for sid in report.get("kept", []):
            fate[sid] = f"kept (step {v.step})"
        for r in report.get("rejected", []):
            fate[r.get("skill_id", "")] = f"{r.get('reason', 'rejected')} (step {v.step})"
    return fate


def ranked_skills_section(bank_path: Path, level: str) -> list[str]:
    """Markdown: the best and the worst Local candidates of the run by Strength, with scope, step, source
    trajectory and their fate at consolidation."""
    versions, candidates = _read_bank(bank_path)
    lines = [f"{level}# Ranked Local skills", ""]
    scored = [s for s in candidates if isinstance(s.scores.get("strength"), (int, float))]
    if not scored:
        return lines + ["No scored Local skill in the skill bank.", ""]
    scored.sort(key=lambda s: (-float(s.scores["strength"]), s.step, s.skill_id))
    picked = list(enumerate(scored))
    shown = picked[:RANKED_TOP] + picked[max(RANKED_TOP, len(picked) - RANKED_BOTTOM):]
    fate = _fates(versions)
    rows = [[str(i + 1), f"{float(s.scores['strength']):.4g}", s.scope, str(s.step),
             s.source_traj_ids[0] if s.source_traj_ids else "", fate.get(s.skill_id, "not consolidated yet"),
             _cut(s.text)] for i, s in shown]
    if len(shown) == len(scored):
        lines += [f"All {len(scored)} scored candidates, by Strength.", ""]
    else:
        lines += [f"{len(scored)} scored candidates; the top {RANKED_TOP} and the bottom {len(shown) - RANKED_TOP} "
                  "by Strength.", ""]
    return lines + markdown_table(["rank", "Strength", "scope", "step", "source trajectory", "consolidation",
                                   "skill"], rows).splitlines() + [""]


__all__ = ["global_versions_section", "ranked_skills_section"]
