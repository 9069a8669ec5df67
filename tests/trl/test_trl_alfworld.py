"""SkillDuetGRPOTrainer on the real ALFWorld engine (generated games), with the real prompts and projection."""

from __future__ import annotations

import pytest

pytest.importorskip("alfworld")


@pytest.fixture(scope="module")
def alfworld_games(tmp_path_factory):
    from skillduet_plugin.envs.alfworld.generator import generate_games

    root = tmp_path_factory.mktemp("alfworld_games")
    generate_games(root, "train", n_per_type=1, seed=0, task_types=("pick", "clean"))
    return root


@pytest.mark.slow
def test_two_steps_on_generated_alfworld_games(make_trainer, alfworld_games, tmp_path):
    from skillduet_plugin.envs import make
    from skillduet_plugin.integrations.trl import task_dataset
    from skillduet_plugin.skills.bank import BANK_FILENAME, SkillBank

    with make("alfworld", data_dir=str(alfworld_games), split="train") as env:
        dataset = task_dataset(env)
        assert sorted(dataset["scope"]) == ["clean", "pick"]
    trainer = make_trainer(out_dir=tmp_path / "alf", env_name="alfworld", max_steps=2, max_turns=2,
                           max_new_tokens_per_turn=16, max_completion_length=400,
                           env_kwargs={"data_dir": str(alfworld_games)},
                           skillduet={"consolidation_interval": 1, "opd_coef": 0.2},
                           trainer_kwargs={"train_dataset": dataset, "rollout_kwargs": {}})
    trainer.train()
    history = [h for h in trainer.rollout_history if h["mode"] == "train"]
    assert len(history) == 2
    episodes = trainer.last_rollout["episodes"]
    first = episodes[0]
    assert first.scope in ("pick", "clean") and first.task
    assert "Your task is to:" in first.prompt_messages[-1]["content"]
    # The random policy mostly answers invalidly; ALFWorld still steps every episode (turns >= 1).
    assert all(ep.num_turns >= 1 and len(ep.valid) == ep.num_turns for ep in episodes)
    for ep in episodes:  # a second turn follows an environment turn, which is masked out
        if ep.num_turns > 1:
            assert ep.tokens.completion_mask.count(0) > 1
    bank = SkillBank(tmp_path / "alf" / BANK_FILENAME, readonly=True)
    try:
        assert bank.candidates() and bank.history()  # skills extracted and consolidated (interval 1)
    finally:
        bank.close()
    # The Global made after step 1 guided step 2 for that task's scope, if step 2 played the same scope.
    step1_scope = trainer.train_dataset[trainer.train_dataset["task_id"].index(history[0]["task_ids"][0])]["scope"]
    step2_scope = episodes[0].scope
    if step1_scope == step2_scope:
        assert all(v == 1 for v in history[1]["global_versions"])
