"""The tracker bridge: what the lifecycle tells it, and the bounded tables and Global panels it makes."""

from __future__ import annotations

from test_skill_lifecycle import _run

from skillduet_plugin.config import SkillDuetConfig
from skillduet_plugin.core.conversation import ChatTokenizer
from skillduet_plugin.skills.bank import BANK_FILENAME
from skillduet_plugin.skills.consolidate import ConsolidationReport
from skillduet_plugin.skills.lifecycle import SkillLifecycle
from skillduet_plugin.skills.tracking import (SkillTracker, TrackerBridge, candidate_rows, global_diff,
                                              global_markdown, local_columns, local_skill_rows)
from skillduet_plugin.skills.tracking_writers import ConsoleWriter
from skillduet_plugin.skills.types import Skill, Trajectory

from skills_fakes import FakeBackend


class RecordingWriter:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def text(self, tag, markdown, step):
        self.calls.append(("text", tag, step, markdown))

    def table(self, tag, columns, rows, step):
        self.calls.append(("table", tag, step, list(columns), [list(r) for r in rows]))


def _skills(n: int) -> list[Skill]:
    return [Skill(text=f"skill number {i}", scope="clean", kind="procedure", step=3, source_traj_ids=(f"t{i}",),
                  scores={"strength": float(i)}) for i in range(n)]


def test_local_rows_are_the_top_and_bottom_by_strength_each_once():
    skills = _skills(12)
    trajs = [Trajectory(traj_id="t11", task_id="x", scope="clean", reward=0.5)]
    rows = local_skill_rows(skills, {s.skill_id: s.scores for s in skills}, trajs, k=3)
    assert [(r[0], r[1], r[2]) for r in rows] == [(1, "top", "11"), (2, "top", "10"), (3, "top", "9"),
                                                  (10, "bottom", "2"), (11, "bottom", "1"), (12, "bottom", "0")]
    columns = local_columns()
    assert columns[2:5] == ["strength", "contrast", "utility"]  # every registered score, the ranking one first
    assert rows[0][columns.index("source_trajectory")] == "t11" and rows[0][columns.index("source_reward")] == "0.5"
    few = local_skill_rows(skills[:4], {}, [], k=3)  # fewer than 2k: every skill once, none twice
    assert [r[0] for r in few] == [1, 2, 3, 4] and [r[1] for r in few] == ["top"] * 3 + ["bottom"]
    long = Skill(text="word " * 200, scope="s", kind="shared")
    assert len(local_skill_rows([long], {}, [], max_chars=50)[0][-1]) == 50  # bounded in size


def test_candidate_rows_say_kept_or_why_not_and_the_global_panel_has_the_diff():
    a, b, c = _skills(3)
    report = ConsolidationReport(scope="clean", step=4, selector="strength", n_candidates=3, kept=[c.skill_id],
                                 rejected=[{"skill_id": a.skill_id, "reason": "below_top_k", "detail": "strength=0"},
                                           {"skill_id": b.skill_id, "reason": "near_duplicate", "detail": "0.9"}],
                                 items=["open it", "then clean it"], tokens=9, budget_tokens=100,
                                 parent_version=1, version=2)
    rows = candidate_rows(report, [a, b, c])
    assert [(r[0], r[1].split(":")[0]) for r in rows] == [("kept", ""), ("rejected", "near_duplicate"),
                                                          ("rejected", "below_top_k")]
    panel = global_markdown(report, "- open it")
    assert "**Global `clean` v2**" in panel and "- then clean it" in panel
    assert "    +- then clean it" in panel and "Diff v1 -> v2" in panel
    assert global_diff("same", "same") == "(no change)"


def test_a_failing_writer_never_stops_the_others():
    class Broken:
        def table(self, *a):
            raise RuntimeError("tracker down")

    good = RecordingWriter()
    TrackerBridge([Broken(), good]).on_scores(3, _skills(2), {}, [])
    assert [c[:3] for c in good.calls] == [("table", "skillduet_skills/local_ranked", 3)]


def test_lifecycle_reports_scores_and_consolidations_to_its_tracker(tmp_path, tiny_tokenizer):
    lc = SkillLifecycle(SkillDuetConfig(consolidation_interval=2, skill_token_budget=400), tmp_path / BANK_FILENAME,
                        tokenizer=tiny_tokenizer, analyzer=FakeBackend(), synthesizer=FakeBackend(), similarity=None)
    assert type(lc.tracker) is SkillTracker  # nothing connected: nothing logged
    writer = RecordingWriter()
    lc.tracker = TrackerBridge([writer], k=2)
    _run(lc, ChatTokenizer(tiny_tokenizer), [1, 2])
    tables = [(c[1], c[2]) for c in writer.calls if c[0] == "table"]
    assert [step for tag, step in tables if tag == "skillduet_skills/local_ranked"] == [1, 2]
    versions = lc.bank.history()
    assert versions and {v.step for v in versions} == {2}
    texts = {c[1]: c[3] for c in writer.calls if c[0] == "text"}
    for v in versions:
        assert all(line in texts[f"skillduet_skills/global/{v.scope}"] for line in v.text.splitlines())
        assert ("skillduet_skills/consolidation/" + v.scope, 2) in tables
    lc.close()


def test_console_writer_is_short():
    lines: list[str] = []
    ConsoleWriter(lines.append, max_rows=2).table("skillduet_skills/local_ranked", ["a"], [[1], [2], [3], [4]], 5)
    assert lines[0].startswith("[skillduet_skills/local_ranked step 5]") and lines[0].endswith("(2 more rows)")
