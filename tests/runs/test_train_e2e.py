"""``skillduet train`` end to end on the tiny model and a few generated ALFWorld games, then ``skillduet eval``
on the run directory it printed."""

from __future__ import annotations

import json

import pytest
import yaml

pytest.importorskip("trl")
pytest.importorskip("alfworld")


@pytest.mark.slow
def test_train_then_eval(games, tmp_path, monkeypatch, capsys):
    from skillduet_plugin.cli import main
    from skillduet_plugin.runs.config import RunConfig
    from skillduet_plugin.skills.bank import SkillBank

    monkeypatch.setenv("SKILLDUET_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "run"
    code = main(["train", f"data_dir={games}", "model=tiny", "steps=2", "tasks_per_step=1", "num_generations=2",
                 "max_turns=2", "max_new_tokens_per_turn=32", "eval_tasks=2", "warm_start.games=2",
                 "warm_start.steps=2", "skillduet.consolidation_interval=1", "--output-dir", str(out)])
    assert code == 0
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed[-1] == str(out.resolve())

    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "event" not in r]
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:
        assert 0.0 <= r["success"] <= 1.0 and any(k.startswith("success/") for k in r)
        assert "opd/gate_mean" in r and "reward" in r and "global/items" in r and "time/step_s" in r
    assert steps[-1]["global/items"] >= 1
    summary = next(r for r in records if r.get("event") == "summary")
    assert summary["success_before"] is not None and summary["success_after"] is not None

    bank = SkillBank(out / "skill_bank.sqlite", readonly=True)
    versions = bank.history()
    bank.close()
    assert versions and {v.step for v in versions} <= {1, 2}
    assert {p.name for p in (out / "plots").iterdir()} == {
        "success_per_task_type.png", "opd_gate.png", "mechanism.png", "strength_per_consolidation.png",
        "global_size.png"}
    # the mechanism chain: the teacher check each step, the teachers before and after RL on the RL games
    checked = sum("teacher_check/success_with_local" in r for r in steps)
    assert checked == sum(bool(r.get("skills/extracted")) for r in steps) >= 1
    for r in steps:
        if r.get("skills/extracted"):
            assert 0.0 <= r["teacher_check/success_with_local"] <= 1.0
            assert r["teacher_check/difference"] == pytest.approx(
                r["teacher_check/success_with_local"] - r["teacher_check/success_without_local"])
    teacher = summary["teacher"]
    trained = json.loads((out / "eval" / "teacher_before_train.json").read_text())
    assert set(trained["skills"]) <= set(json.loads((out / "eval" / "before_train.json").read_text())
                                         ["conditions"]["none"]["outcomes"])
    for mode in ("greedy", "sampled"):
        block = teacher[mode]
        assert block["tasks"] == len(trained["skills"]) >= 1
        d = block["student_after - teacher_before"]
        assert d["estimate"] == pytest.approx(block["student_after"] - block["teacher_before"])
    resolved = yaml.safe_load((out / "config.yaml").read_text())
    config = RunConfig.from_dict(resolved)
    assert config.steps == 2 and config.data_dir == str(games) and config.method_config().consolidation_interval == 1
    assert (out / "final_model" / "config.json").is_file()
    assert json.loads((out / "eval" / "before.json").read_text())["conditions"]["none"]["episodes"] == 2

    code = main(["eval", str(out), "--limit", "2"])
    assert code == 0
    table = capsys.readouterr().out
    assert "| None |" in table and "| Learned Global |" in table and "| Length-matched neutral |" in table
    result = json.loads((out / "eval" / "eval_valid_unseen.json").read_text())
    # the run's own action selection (the tiny demo model chooses among admissible actions)
    expected = "greedy" if config.action_mode == "generate" else "greedy choice"
    assert result["decoding"] == expected and result["panel_size"] == 2
    assert (out / "eval" / "eval_valid_unseen.md").read_text() in table


def test_train_rejects_bad_config(capsys):
    from skillduet_plugin.cli import main

    assert main(["train", "steps=0"]) == 2
    assert "steps=0 is invalid" in capsys.readouterr().err
