"""The skills through verl's own ``Tracking`` (``trainer.logger``): its TensorBoard writer, the ``wandb`` module it
logs with (offline) and its console, read back from the files they wrote. The whole fit does the same in
``test_real_fit.py``; here the bridge is checked alone, with a negative control."""

from __future__ import annotations

import pytest

pytest.importorskip("verl")

from verl.utils.tracking import Tracking  # noqa: E402

from skillduet_plugin.integrations.verl.tracking import tracker_from_verl  # noqa: E402
from skillduet_plugin.skills.consolidate import ConsolidationReport  # noqa: E402
from skillduet_plugin.skills.tracking import SkillTracker, TrackerBridge  # noqa: E402
from skillduet_plugin.skills.tracking_writers import ConsoleWriter, TensorBoardWriter, WandbWriter  # noqa: E402
from skillduet_plugin.skills.types import Skill  # noqa: E402
from skillduet_testing.tracker_files import (tensorboard_scalars, tensorboard_texts,  # noqa: E402
                                             wandb_flushed, wandb_history, wandb_media, wandb_offline_runs)


def _emit(tracker, tracking) -> Skill:
    skill = Skill(text="open the fridge before looking inside", scope="cool", kind="procedure", step=3,
                  source_traj_ids=("3-cool-0",), scores={"strength": 0.4})
    tracking.log({"actor/pg_loss": 0.5}, step=3)
    tracker.on_scores(3, [skill], {skill.skill_id: skill.scores}, [])
    report = ConsolidationReport(scope="cool", step=3, selector="strength", n_candidates=1, kept=[skill.skill_id],
                                 items=["open the fridge first"], tokens=6, budget_tokens=100, version=1)
    tracker.on_consolidation(3, [report], {"cool": [skill]}, {"cool": ""})
    return skill


def test_tensorboard_and_console_through_verl_tracking(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TENSORBOARD_DIR", str(tmp_path / "tb"))
    tracking = Tracking("p", "e", default_backend=["console", "tensorboard"])
    tracker = tracker_from_verl(tracking)
    assert isinstance(tracker, TrackerBridge)
    assert [type(w) for w in tracker.writers] == [TensorBoardWriter, ConsoleWriter]
    assert tracker.writers[0].summary_writer is tracking.logger["tensorboard"].writer  # verl's, not ours
    skill = _emit(tracker, tracking)
    tracking.finish()
    texts = tensorboard_texts(tmp_path / "tb")
    assert set(texts) == {"skillduet_skills/local_ranked", "skillduet_skills/global/cool",
                          "skillduet_skills/consolidation/cool"}
    assert skill.skill_id in texts["skillduet_skills/local_ranked"][3]
    assert "- open the fridge first" in texts["skillduet_skills/global/cool"][3]
    assert "[skillduet_skills/global/cool step 3]" in capsys.readouterr().out


def test_without_the_bridge_verl_event_files_hold_only_scalars(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORBOARD_DIR", str(tmp_path / "tb"))
    tracking = Tracking("p", "e", default_backend=["tensorboard"])
    _emit(SkillTracker(), tracking)
    tracking.finish()
    assert tensorboard_scalars(tmp_path / "tb") == {"actor/pg_loss": {3: 0.5}}  # the reader reads this file
    assert tensorboard_texts(tmp_path / "tb") == {}


def test_backends_that_cannot_show_text_get_no_bridge(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(tmp_path / "m.jsonl"))
    assert type(tracker_from_verl(Tracking("p", "e", default_backend=["file"]))) is SkillTracker
    assert type(tracker_from_verl(None)) is SkillTracker


@pytest.mark.slow  # wandb's service process starts in ~5 s idle, 20+ s under load
def test_wandb_offline_through_verl_tracking(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    tracking = Tracking("p", "e", default_backend=["wandb"])
    tracker = tracker_from_verl(tracking)
    assert [type(w) for w in tracker.writers] == [WandbWriter]
    _emit(tracker, tracking)
    tracking.finish()
    wandb_flushed()
    (run_dir,) = wandb_offline_runs(tmp_path)
    (row,) = [r for r in wandb_history(run_dir) if "skillduet_skills/local_ranked/path" in r]
    assert row["_step"] == 3 and row["actor/pg_loss"] == 0.5  # the skills share verl's step
    table = wandb_media(run_dir, {"path": row["skillduet_skills/local_ranked/path"]})
    assert table["data"][0][-1] == "open the fridge before looking inside"
    page = wandb_media(run_dir, {"path": row["skillduet_skills/global/cool/path"]})
    assert "- open the fridge first" in page
