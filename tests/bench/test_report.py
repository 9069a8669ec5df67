"""``skillduet report``: a Markdown report with images from synthetic run directories (one run, and several)."""

from __future__ import annotations

import base64
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from skillduet_plugin.cli import main as cli_main  # noqa: E402
from skillduet_plugin.reporting import build_report, load_run  # noqa: E402
from skillduet_plugin.reporting.plots import smooth  # noqa: E402
from skillduet_plugin.reporting.runs import normalise_records  # noqa: E402
from skillduet_plugin.skills.bank import SkillBank  # noqa: E402
from skillduet_plugin.skills.types import Skill  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def make_run(root: Path, *, name: str, method: str, success: list[float], with_bank: bool = True,
             trl_names: bool = False) -> Path:
    """A run directory as `skillduet train` leaves it: config.yaml, metrics.jsonl, skill_bank.sqlite."""
    root.mkdir(parents=True)
    (root / "config.yaml").write_text(f"name: {name}\nenv: alfworld\nmodel: tiny:small\n"
                                      f"skillduet:\n  method: {method}\n")
    lines = [json.dumps({"event": "start", "time": 0})]
    for step, s in enumerate(success, start=1):
        rec = {"step": step, "pick": s, "success/pick": s, "success/clean": 1 - s,
               "skills/step_analyzer_failures": float(step % 2), "skills/step_analyzer_requests": 4.0}
        rec["env/won" if trl_names else "success"] = s
        if method != "grpo":
            rec.update({"opd/gate_mean": 0.5 + 0.01 * step, "opd/gate_active_ratio": 0.4, "opd/loss": -0.1,
                        "opd/teacher_minus_student": 0.2, "skills/global_tokens": 10.0 * step})
        lines.append(json.dumps(rec))
    lines.append(json.dumps({"event": "summary", "success_before": 0.25, "success_after": 0.5}))
    (root / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    (root / "eval").mkdir()
    (root / "eval" / "after.json").write_text(json.dumps({"panel": "valid_unseen", "conditions": {
        "none": {"success": 0.5, "avg": 0.5, "episodes": 4, "per_type": {"clean": 1.0, "pick": 0.0}},
        "learned": {"success": 0.75, "avg": 0.75, "episodes": 4, "per_type": {"clean": 1.0, "pick": 0.5}}}}))
    if with_bank:
        bank = SkillBank(root / "skill_bank.sqlite")
        a = Skill(text="open the fridge first", scope="pick", kind="procedure", step=1)
        b = Skill(text="never drop the apple", scope="pick", kind="correction", step=2)
        c = Skill(text="clean it in the sinkbasin", scope="clean", kind="procedure", step=4)
        bank.add_candidates([a], step=1)
        bank.add_candidates([b], step=2)
        bank.add_candidates([c], step=4)
        bank.record_scores({a.skill_id: {"strength": 0.2}, b.skill_id: {"strength": 0.4}}, step=None)
        bank.record_scores({c.skill_id: {"strength": 0.9}}, step=None)
        bank.commit_consolidation(3, [{"scope": "pick", "items": ["open the fridge first"],
                                       "text": "- open the fridge first", "selector": "strength"}])
        bank.commit_consolidation(6, [{"scope": "clean", "items": ["clean it", "then place it"],
                                       "text": "- clean it in the sinkbasin\n- then place it", "selector": "strength"}])
        bank.close()
    return root


class PageParser(HTMLParser):
    """Headings, images, links and table header rows of an HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.headings: list[str] = []
        self.images: list[str] = []
        self.urls: list[str] = []
        self.tables = 0
        self._in_heading = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag in ("h1", "h2", "h3", "h4"):
            self._in_heading = True
            self.headings.append("")
        elif tag == "img":
            self.images.append(attrs.get("src") or "")
        elif tag == "table":
            self.tables += 1
        self.urls += [v for k, v in attrs.items() if k in ("src", "href") and v]

    def handle_endtag(self, tag):
        if tag in ("h1", "h2", "h3", "h4"):
            self._in_heading = False

    def handle_data(self, data):
        if self._in_heading:
            self.headings[-1] += data


def parse_page(path: Path) -> PageParser:
    parser = PageParser()
    parser.feed(path.read_text())
    return parser


def images(md: Path) -> list[Path]:
    return [md.parent / rel for rel in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md.read_text())]


def test_single_run_report_has_every_plot_and_hand_checked_numbers(tmp_path):
    run = make_run(tmp_path / "run", name="demo", method="skillduet", success=[0.0, 0.25, 0.5, 0.5, 0.75, 1.0])
    md = build_report([run])
    assert md == run / "report.md"
    text = md.read_text()
    for heading in ("Learning curve", "OPD gate", "Strength per consolidation", "Global size and token count",
                    "Analyzer failures"):
        assert heading in text
    pngs = images(md)
    assert len(pngs) == 5
    for png in pngs:
        assert png.read_bytes()[:8] == PNG_MAGIC, png
    # success over the last 5 steps: (0.25 + 0.5 + 0.5 + 0.75 + 1.0) / 5 = 0.6; 2 consolidations;
    # Global tokens at the last step 60; analyzer failures 1+0+1+0+1+0 = 3
    assert "| demo (skillduet) | skillduet | alfworld | tiny:small | 6 | 0.6 | 2 | 60 | 3 |" in text
    # Strength rows: step 3 chose from a (0.2) and b (0.4): mean 0.3, max 0.4; step 6 from c alone: 0.9
    assert "| 3 | 2 | 0.3 | 0.4 |" in text
    assert "| 6 | 1 | 0.9 | 0.9 |" in text
    # Global versions: "- clean it in the sinkbasin\n- then place it" is 10 whitespace words (the "-" bullets count)
    assert "| 6 | clean | 1 | 2 | 10 |" in text
    # the evaluation file as a condition x metric table, the run's summary event as metric/value rows
    assert "| condition | success | avg | episodes | clean | pick |" in text
    assert "| learned | 0.75 | 0.75 | 4 | 1 | 0.5 |" in text
    assert "| success_after | 0.5 |" in text
    # the skills: both Global versions, and the candidates ranked by Strength with their fate
    assert "**`pick` v1** (step 3" in text and "- clean it in the sinkbasin" in text
    assert re.search(r"\| 1 \| 0\.9 \| clean \| 4 \|", text) and "| 3 | 0.2 | pick | 1 |" in text


def test_report_page_is_self_contained_with_every_section_and_image(tmp_path):
    run = make_run(tmp_path / "run", name="demo", method="skillduet", success=[0.0, 0.25, 0.5, 0.5, 0.75, 1.0])
    md = build_report([run])
    page = parse_page(md.with_suffix(".html"))
    for heading in ("SkillDuet run report", "Learning curve (overall and per task type)", "OPD gate",
                    "Strength per consolidation", "Global size and token count", "Global versions",
                    "Ranked Local skills", "Analyzer failures", "Evaluation (Table-3 rows)"):
        assert heading in page.headings, heading
    assert len(page.images) == len(images(md)) == 5
    for src in page.images:  # every image inlined, a real PNG
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1])[:8] == PNG_MAGIC
    assert not [u for u in page.urls if not u.startswith(("data:", "#"))]  # nothing fetched from anywhere
    assert page.tables >= 5
    text = md.with_suffix(".html").read_text()
    assert "<td>learned</td><td>0.75</td>" in text and "open the fridge first" in text


def test_report_page_of_several_runs_and_a_global_diff(tmp_path):
    a = make_run(tmp_path / "a", name="sd", method="skillduet", success=[0.1, 0.3, 0.5, 0.7])
    bank = SkillBank(a / "skill_bank.sqlite")
    bank.commit_consolidation(8, [{"scope": "pick", "items": ["open the fridge first", "then take the apple"],
                                   "text": "- open the fridge first\n- then take the apple", "selector": "strength"}])
    bank.close()
    b = make_run(tmp_path / "b", name="base", method="grpo", success=[0.1, 0.2, 0.2, 0.3], with_bank=False)
    md = build_report([a, b], tmp_path / "cmp.md", labels=["SkillDuet", "GRPO"])
    page = parse_page(md.with_suffix(".html"))
    assert {"Side by side", "Each run", "SkillDuet", "GRPO"} <= set(page.headings)
    assert page.headings.count("Global versions") == 2 and len(page.images) == len(images(md))
    text = md.with_suffix(".html").read_text()
    assert '<span class="add">+- then take the apple</span>' in text  # v1 -> v2 of pick, as a coloured diff


def test_several_runs_side_by_side_through_the_cli(tmp_path, capsys):
    a = make_run(tmp_path / "a", name="sd", method="skillduet", success=[0.1, 0.3, 0.5, 0.7])
    b = make_run(tmp_path / "b", name="base", method="grpo", success=[0.1, 0.2, 0.2, 0.3], with_bank=False,
                 trl_names=True)
    out = tmp_path / "cmp" / "cmp.md"
    assert cli_main(["report", str(a), str(b), "--out", str(out), "--label", "SkillDuet", "--label", "GRPO"]) == 0
    assert capsys.readouterr().out.split() == [str(out.resolve()), str(out.resolve().with_suffix(".html"))]
    text = out.read_text()
    assert "## Side by side" in text and "### SkillDuet" in text and "### GRPO" in text
    names = {p.name for p in images(out)}
    assert {"compare_success.png", "compare_task_types.png", "compare_opd_gate.png", "compare_global_tokens.png",
            "compare_analyzer.png", "run0_success.png", "run1_success.png"} <= names
    assert all(p.read_bytes()[:8] == PNG_MAGIC for p in images(out))
    # GRPO logged env/won (the TRL name): mean of the last 4 steps = 0.2; no OPD, no bank
    assert "| GRPO | grpo | alfworld | tiny:small | 4 | 0.2 | 0 | – |" in text
    assert "No OPD metrics in this run" in text
    assert "No Global version in the skill bank" in text


def test_missing_metrics_is_a_clear_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="metrics.jsonl"):
        build_report([tmp_path / "empty"])
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_run(tmp_path / "nope")
    run = make_run(tmp_path / "r", name="x", method="grpo", success=[0.0], with_bank=False)
    with pytest.raises(ValueError, match=r"\.md"):
        build_report([run], tmp_path / "out.html")
    with pytest.raises(ValueError, match="one label per run"):
        build_report([run], labels=["a", "b"])


def test_aliases_fill_missing_names_only():
    recs = normalise_records([{"step": 1, "env/won": 0.5, "skills/global_tokens": 7.0},
                              {"step": 2, "success": 0.9, "env/won": 0.1}])
    assert recs[0]["success"] == 0.5 and recs[0]["global/tokens"] == 7.0
    assert recs[1]["success"] == 0.9  # an existing name is never overwritten


def test_smooth_is_a_trailing_mean():
    assert smooth([1.0, 3.0, 5.0, 7.0], 2) == [1.0, 2.0, 4.0, 6.0]
    assert smooth([2.0], 5) == [2.0]
    with pytest.raises(ValueError):
        smooth([1.0], 0)
