"""The warm start's purpose, checked on real (generated) ALFWorld games: cloning the searching expert makes the
tiny model win sampled episodes in choose mode (as RL rollouts are played), where the untrained model wins none."""

from __future__ import annotations

import pytest
import torch

from skillduet_plugin.envs import make
from skillduet_plugin.envs.pool import EnvPool
from skillduet_plugin.rollout.choice import hf_choice_fn
from skillduet_plugin.rollout.collector import run_episodes
from skillduet_plugin.core.conversation import ChatTokenizer
from skillduet_plugin.warmstart.episodes import build_cloning_data, clone, play_expert

pytest.importorskip("alfworld")

MAX_TURNS, MAX_TOKENS, GROUP = 12, 2560, 4


def _sampled_wins(model, chat, data_dir, tasks) -> list[list[bool]]:
    torch.manual_seed(0)
    with EnvPool("alfworld", num_workers=0, env_kwargs={"data_dir": str(data_dir), "split": "train"}) as pool:
        with torch.no_grad():
            episodes = run_episodes([t for t in tasks for _ in range(GROUP)], env_name="alfworld", pool=pool,
                                    chat=chat, max_turns=MAX_TURNS, max_new_tokens=32,
                                    max_total_tokens=MAX_TOKENS, action_selection="choose",
                                    choose_fn=hf_choice_fn(model, chat, do_sample=True))
    wins = [bool(ep.won) for ep in episodes]
    return [wins[i:i + GROUP] for i in range(0, len(wins), GROUP)]


@pytest.mark.slow
def test_cloning_the_searching_expert_makes_the_tiny_model_win(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from skillduet_plugin.envs.alfworld.generator import generate_games

    generate_games(tmp_path, "train", n_per_type=2, seed=0)
    env = make("alfworld", data_dir=tmp_path, split="train")
    try:
        tasks = env.tasks
        records = [play_expert(env, t, max_turns=MAX_TURNS, seed=k) for t in tasks for k in range(2)]
    finally:
        env.close()
    assert sum(r.won for r in records) >= 0.8 * len(records)
    chat = ChatTokenizer(AutoTokenizer.from_pretrained(tiny_model_dir))
    episodes = build_cloning_data(records, "alfworld", chat, max_total_tokens=MAX_TOKENS, plans=[None] * len(records),
                                  skill_token_budget=64, skill_position="after_task")
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    before = _sampled_wins(model, chat, tmp_path, tasks)
    assert sum(map(sum, before)) == 0

    stats = clone(model, episodes, steps=300, batch_size=4, learning_rate=6e-3,
                  pad_token_id=chat.pad_token_id)
    assert stats["steps"] == 300
    after = _sampled_wins(model, chat, tmp_path, tasks)
    # measured: 38 of 48 sampled episodes won after 300 cloning steps (0 before)
    assert sum(map(sum, after)) >= 0.25 * len(tasks) * GROUP, after
