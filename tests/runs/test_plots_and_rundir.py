"""Run directory helpers, the metrics writer, and the plots drawn from metrics.jsonl and the skill bank."""

from __future__ import annotations

import json
import math

import pytest

from skillduet_plugin.config import ConfigError
from skillduet_plugin.runs.plots import global_sizes, plot_run, strength_by_consolidation
from skillduet_plugin.runs.recorder import rollout_metrics
from skillduet_plugin.runs.rundir import MetricsWriter, RunDir, read_metrics, resolve_model
from skillduet_plugin.skills.bank import SkillBank
from skillduet_plugin.skills.types import Skill


def _bank(path):
    bank = SkillBank(path)
    a = Skill(text="open the fridge first", scope="cool", kind="procedure")
    b = Skill(text="never drop the mug", scope="cool", kind="correction")
    c = Skill(text="use the lamp last", scope="look", kind="procedure")
    bank.add_candidates([a, b], step=1)
    bank.record_scores({a.skill_id: {"strength": 0.5}, b.skill_id: {"strength": 0.25}}, step=1)
    bank.commit_consolidation(2, [{"scope": "cool", "items": ["open the fridge first"], "text": "- open the fridge",
                                   "selector": "strength", "report": {}}])
    bank.add_candidates([c], step=3)
    bank.record_scores({c.skill_id: {"strength": 0.125}}, step=3)
    bank.commit_consolidation(4, [{"scope": "look", "items": ["use the lamp last", "x"], "text": "- use the lamp\n- x",
                                   "selector": "strength", "report": {}}])
    bank.close()


def test_metrics_writer_is_json_lines_and_safe(tmp_path):
    import torch

    writer = MetricsWriter(tmp_path / "metrics.jsonl")
    writer.write({"step": 1, "loss": torch.tensor(0.5), "bad": float("nan"), "nested": {"x": math.inf}})
    writer.write({"step": 2, "loss": 0.25})
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write('{"step": 3, "torn"')  # a crash mid-line
    records = read_metrics(tmp_path)
    assert records == [{"step": 1, "loss": 0.5, "bad": None, "nested": {"x": None}}, {"step": 2, "loss": 0.25}]


def test_run_dir_create_and_refuse_finished(tmp_path):
    run = RunDir.create(None, "demo", runs_root=tmp_path)
    assert run.root.parent == tmp_path and run.root.name.endswith("-demo")
    second = RunDir.create(None, "demo", runs_root=tmp_path)
    assert second.root != run.root
    run.metrics.write_text("{}\n")
    with pytest.raises(ConfigError, match="already holds a run"):
        RunDir.create(str(run.root), "demo")
    with pytest.raises(FileNotFoundError, match="not a run directory"):
        RunDir.open(tmp_path)


def test_resolve_model(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="model='/nowhere'"):
        resolve_model("/nowhere")
    monkeypatch.setenv("SKILLDUET_CACHE", str(tmp_path))
    folder = resolve_model("tiny")
    assert folder.parent == tmp_path / "models" and (folder / "config.json").is_file()
    assert resolve_model("tiny") == folder  # reused


def test_strength_and_global_sizes_from_the_bank(tmp_path):
    _bank(tmp_path / "skill_bank.sqlite")
    assert strength_by_consolidation(tmp_path / "skill_bank.sqlite") == {2: [0.5, 0.25], 4: [0.125]}
    sizes = global_sizes(tmp_path / "skill_bank.sqlite")
    assert [(s["step"], s["scope"], s["version"], s["items"], s["tokens"]) for s in sizes] == [
        (2, "cool", 1, 1, 4), (4, "look", 1, 2, 6)]
    assert strength_by_consolidation(tmp_path / "missing.sqlite") == {}


def test_rollout_metrics_per_task_type():
    from types import SimpleNamespace

    eps = [SimpleNamespace(scope=s, won=w, reward=float(w), num_turns=3) for s, w in
           [("pick", True), ("pick", False), ("heat", False), ("heat", False)]]
    m = rollout_metrics(eps)
    assert m == {"success": 0.25, "env_reward": 0.25, "turns": 3.0, "success/heat": 0.0, "success/pick": 0.5}


def test_plot_run_writes_all_pngs(tmp_path):
    _bank(tmp_path / "skill_bank.sqlite")
    with (tmp_path / "metrics.jsonl").open("w") as f:
        for step in range(1, 5):
            f.write(json.dumps({"step": step, "success": step / 8, "success/cool": step / 4, "success/look": 0.0,
                                "opd/gate_mean": 0.5, "opd/gate_active_ratio": 0.4,
                                "opd/teacher_minus_student": 0.01 * step, "opd/loss": -0.1,
                                "teacher_check/success_with_local": 0.5, "teacher_check/success_without_local": 0.25,
                                "global/items": float(step // 2), "global/tokens": 4.0 * (step // 2)}) + "\n")
        f.write(json.dumps({"event": "summary", "success_before": 0.0}) + "\n")
    roles = {"student_before": 0.2, "teacher_before": 0.6, "student_after": 0.5, "teacher_after": 0.7, "tasks": 5}
    (tmp_path / "summary.json").write_text(json.dumps({"teacher": {"sampled": roles}}))
    paths = plot_run(tmp_path)
    assert [p.name for p in paths] == ["success_per_task_type.png", "opd_gate.png", "mechanism.png",
                                       "strength_per_consolidation.png", "global_size.png"]
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000
