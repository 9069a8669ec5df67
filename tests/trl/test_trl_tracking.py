"""The skills in TRL's own trackers (``report_to``): a real run writes TensorBoard event files and a W&B offline
run, read back with tensorboard's event reader and the W&B record log. Nothing contacts a server."""

from __future__ import annotations

import html

import pytest

from skillduet_plugin.integrations.trl import callback as callback_module
from skillduet_plugin.skills.bank import BANK_FILENAME, SkillBank
from skillduet_plugin.skills.tracking import CANDIDATE_COLUMNS, SkillTracker, local_columns
from skillduet_testing.tracker_files import (tensorboard_scalars, tensorboard_texts, wandb_flushed,
                                             wandb_history, wandb_media, wandb_offline_runs)

SKILLDUET = {"consolidation_interval": 2, "opd_coef": 0.2}


def _bank(out_dir):
    bank = SkillBank(out_dir / BANK_FILENAME, readonly=True)
    try:
        return bank.history(), {s.step for s in bank.candidates()}
    finally:
        bank.close()


def _offline_env(monkeypatch, tmp_path):
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "tb"))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wb"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    (tmp_path / "wb").mkdir()


@pytest.mark.slow
def test_tensorboard_and_wandb_show_the_global_and_the_ranked_skills(make_trainer, tmp_path, monkeypatch):
    _offline_env(monkeypatch, tmp_path)
    trainer = make_trainer(out_dir=tmp_path / "run", report_to=["tensorboard", "wandb"], skillduet=SKILLDUET)
    trainer.train()
    versions, candidate_steps = _bank(tmp_path / "run")
    assert versions and candidate_steps, "the run must extract and consolidate for the test to mean anything"

    texts = tensorboard_texts(tmp_path / "tb")
    assert set(texts["skillduet_skills/local_ranked"]) == candidate_steps  # one table per step with Local skills
    assert texts["skillduet_skills/local_ranked"][min(candidate_steps)].startswith("| " + " | ".join(local_columns()))
    for v in versions:  # every Global version at its consolidation step: its items, then the diff
        panel = texts[f"skillduet_skills/global/{v.scope}"][v.step]
        assert f"v{v.version}" in panel and "Diff (none) -> v1" in panel
        assert all(line in panel for line in v.text.splitlines())
        table = texts[f"skillduet_skills/consolidation/{v.scope}"][v.step]
        assert "| kept |" in table and table.startswith("| " + " | ".join(CANDIDATE_COLUMNS))
    assert "train/loss" in tensorboard_scalars(tmp_path / "tb")  # TRL's own scalars sit beside them

    wandb_flushed()
    (run_dir,) = wandb_offline_runs(tmp_path / "wb")
    rows = wandb_history(run_dir)
    local = [r for r in rows if r.get("skillduet_skills/local_ranked/_type") == "table-file"]
    assert {r["train/global_step"] for r in local} == candidate_steps
    table = wandb_media(run_dir, {"path": local[0]["skillduet_skills/local_ranked/path"]})
    assert table["columns"] == local_columns() and table["data"]
    v = versions[0]
    (glob_row,) = [r for r in rows if r.get(f"skillduet_skills/global/{v.scope}/_type") == "html-file"
                   and r["train/global_step"] == v.step]
    page = wandb_media(run_dir, {"path": glob_row[f"skillduet_skills/global/{v.scope}/path"]})
    assert all(html.escape(line) in page for line in v.text.splitlines())  # the panel is a <pre> block


@pytest.mark.slow
def test_without_the_bridge_the_event_files_hold_no_skills(make_trainer, tmp_path, monkeypatch):
    """Negative control: the same run with the bridge disconnected; the reader finds the scalars, no skills."""
    _offline_env(monkeypatch, tmp_path)
    monkeypatch.setattr(callback_module, "tracker_from_callbacks", lambda callbacks: SkillTracker())
    trainer = make_trainer(out_dir=tmp_path / "run", report_to=["tensorboard"], skillduet=SKILLDUET)
    trainer.train()
    versions, candidate_steps = _bank(tmp_path / "run")
    assert versions and candidate_steps
    assert "train/loss" in tensorboard_scalars(tmp_path / "tb")
    assert not [tag for tag in tensorboard_texts(tmp_path / "tb") if tag.startswith("skillduet_skills/")]
