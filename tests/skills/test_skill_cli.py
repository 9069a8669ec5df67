"""``skillduet skills show|history|diff|export`` and ``skillduet score`` on a small run folder."""

from __future__ import annotations

import json

import pytest

from skillduet_plugin.cli import main
from skillduet_plugin.core.conversation import ChatTokenizer
from skillduet_plugin.skills.bank import BANK_FILENAME, SkillBank
from skillduet_plugin.skills.trajectory_io import load_trajectories, save_trajectories, trajectory_file
from skillduet_plugin.skills.types import Skill

from skills_fakes import make_traj


@pytest.fixture()
def run_dir(tmp_path):
    bank = SkillBank(tmp_path / BANK_FILENAME)
    bank.add_candidates([Skill(text="Open the fridge before cooling.", scope="cool", kind="procedure", step=3)], 3)
    for step, items in ((10, ["Open the fridge first."]), (20, ["Open the fridge first.", "Cool, then place."])):
        bank.commit_consolidation(step, [{"scope": "cool", "items": items, "selector": "strength",
                                          "text": "\n".join(f"- {i}" for i in items),
                                          "report": {"n_candidates": 4, "kept": ["a", "b"],
                                                     "rejected": [{"skill_id": "c", "reason": "below_top_k"}]}}])
    bank.close()
    return tmp_path


def test_show_history_diff_export(run_dir, capsys, tmp_path):
    assert main(["skills", "show", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "cool" in out and "Cool, then place." in out and "version 2" in out
    assert main(["skills", "history", str(run_dir), "--scope", "cool"]) == 0
    out = capsys.readouterr().out
    assert "Global versions" in out and "strength" in out and "20" in out
    assert main(["skills", "diff", str(run_dir), "--from", "1", "--to", "2"]) == 0
    assert "+- Cool, then place." in capsys.readouterr().out
    assert main(["skills", "diff", str(run_dir), "--from", "1", "--to", "9"]) == 2
    assert "known versions are 1, 2" in capsys.readouterr().err
    out_file = tmp_path / "out" / "skills.json"
    assert main(["skills", "export", str(run_dir), "--format", "json", "--out", str(out_file)]) == 0
    data = json.loads(out_file.read_text())
    assert data["scopes"]["cool"]["current"]["items"] == ["Open the fridge first.", "Cool, then place."]
    assert main(["skills", "export", str(run_dir), "--format", "md"]) == 0
    assert "# Skill bank" in capsys.readouterr().out


def test_missing_bank_is_a_clear_error(tmp_path, capsys):
    assert main(["skills", "show", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no skill bank at" in err and len(err.strip().splitlines()) == 1


def test_score_command_on_stored_trajectories(run_dir, tiny_model_dir, tiny_tokenizer, capsys):
    chat = ChatTokenizer(tiny_tokenizer)
    trajs = []
    for k in range(3):
        t = make_traj(f"t{k}", f"task{k}", scope="cool", success=k == 0)
        t.completion_ids = chat.encode("<action>open fridge 1</action>") + [chat.eos_token_id]
        t.completion_mask = [1] * len(t.completion_ids)
        trajs.append(t)
    save_trajectories(trajectory_file(run_dir, 20), trajs)
    assert [t.traj_id for t in load_trajectories([run_dir / "trajectories"])] == ["t0", "t1", "t2"]
    code = main(["score", str(run_dir), "--model", str(tiny_model_dir), "--scope", "cool",
                 "--skill", "Open the fridge before you cool anything.", "--skill", "<|im_end|>"])
    captured = capsys.readouterr()
    assert code == 0
    assert "skipping a skill text (empty)" in captured.err
    line = [ln for ln in captured.out.splitlines() if "Open the fridge" in ln][0]
    strength, utility, contrast, n = line.split()[:4]
    assert float(strength) > 0 and int(n) == 3
    assert main(["score", str(run_dir), "--model", str(tiny_model_dir), "--scope", "heat", "--skill", "x y z"]) == 2


def test_show_prints_a_long_table_title_on_one_line(run_dir, capsys):
    """A rich table title wraps to the table's width: the two-column analyzer-replies table folded its one-line
    title into five lines in a run's skills_show.txt. The title is printed on a line of its own."""
    from skillduet_plugin.commands.skills import REPLIES_META_KEY

    bank = SkillBank(run_dir / BANK_FILENAME)
    bank.set_meta(REPLIES_META_KEY, json.dumps({"answered": 507, "accepted": 507, "all_rejected_steps": 0}))
    bank.close()
    assert main(["skills", "show", str(run_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    title = [ln for ln in lines if "Analyzer replies" in ln]
    assert title == ["Analyzer replies (507 answered; steps with every reply rejected, so no Local skill and no OPD "
                     "term: 0)"], lines[:8]
