"""``skillduet train`` with an analyzer whose every reply is its prompt copied back (what SmolLM2-135M does greedy):
the run trains to the end, nothing reaches the bank, no trajectory gets a Local skill (no OPD term), and every
step's metrics say so (``skills/analyzer/step_all_rejected``, the rejections by reason, a supervised ratio of 0)."""

from __future__ import annotations

import json

import pytest

from skillduet_plugin.llm.base import ChatBackend, ChatRequest
from skillduet_plugin.llm.registry import BACKENDS, register_backend

pytest.importorskip("trl")
pytest.importorskip("alfworld")
pytestmark = pytest.mark.slow


class EchoBackend(ChatBackend):
    """Answers every request with its own user message (a small model copying its input)."""

    kind = "echo_prompt"

    async def _complete(self, request: ChatRequest) -> str:
        return request.messages[-1]["content"]


@pytest.fixture()
def echo():
    register_backend("echo_prompt")(EchoBackend)
    yield
    BACKENDS.unregister("echo_prompt")


def test_a_run_whose_every_reply_is_rejected_trains_on_without_opd(echo, tmp_path, monkeypatch, capsys):
    from skillduet_plugin.cli import main
    from skillduet_plugin.envs.alfworld.generator import generate_games
    from skillduet_plugin.skills.bank import SkillBank

    games = tmp_path / "games"
    generate_games(games, "train", n_per_type=2, seed=1, task_types=("pick", "look"), max_walkthrough=6)
    generate_games(games, "valid_unseen", n_per_type=1, seed=2, task_types=("pick", "look"), max_walkthrough=6)
    monkeypatch.setenv("SKILLDUET_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "run"
    code = main(["train", f"data_dir={games}", "model=tiny", "steps=2", "tasks_per_step=2", "num_generations=2",
                 "max_turns=2", "max_new_tokens_per_turn=32", "eval_tasks=1", "warm_start.games=2",
                 "warm_start.steps=2", "skillduet.consolidation_interval=2", "skillduet.analyzer.kind=echo_prompt",
                 "--output-dir", str(out)])
    assert code == 0
    capsys.readouterr()
    steps = [r for r in (json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()) if "event" not in r]
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:
        answered = r["skills/step_analyzer_requests"] - r["skills/step_analyzer_failures"]
        assert answered >= 1 and r["skills/analyzer/step_all_rejected"] == 1.0
        assert r["skills/analyzer/step_accepted"] == 0.0 and r["skills/step_local_extracted"] == 0.0
        assert r["skills/analyzer/step_without_local_skill"] >= 1 and r["skills/assigned_ratio"] == 0.0
        assert r["opd/supervised_ratio"] == 0.0  # no trajectory of the step had a teacher context
    last = steps[-1]
    assert last["skills/analyzer/rejected/prompt_structure"] == last["skills/analyzer_requests"]
    bank = SkillBank(out / "skill_bank.sqlite", readonly=True)
    try:
        assert bank.candidates() == [] and bank.history() == []
    finally:
        bank.close()
    assert main(["skills", "show", str(out)]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "rejected: prompt_structure" in shown and "no OPD term: 2" in shown
