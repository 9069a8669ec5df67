"""RL through the adapter moves the policy the right way: after a few GRPO steps on one toy task, the rewarded
action is more likely. Catches sign errors and rewards misaligned with their completions, which a gradient
check with hand-set advantages cannot see."""

from __future__ import annotations

import torch

from skillduet_plugin.config import preset
from skillduet_plugin.integrations.trl import task_dataset
from skillduet_plugin.rollout.choice import action_response, candidate_logprobs
from skillduet_plugin.envs.toy import ToyEnv, toy_initial_messages


def _goal_probability(trainer, task_id: str, goal: str) -> float:
    """The choose-mode probability of ``goal`` at the first turn of ``task_id`` (softmax over the candidates'
    summed log-probs, temperature 1)."""
    env = ToyEnv()
    obs, info = env.reset(task_id)
    chat = trainer.chat
    prompt = chat.prompt_ids(toy_initial_messages("toy", task=info["task"], observation=obs,
                                                  admissible_actions=info["admissible_actions"]))
    actions = list(info["admissible_actions"])
    candidates = [chat.encode(action_response(a)) + [chat.eos_token_id] for a in actions]
    model = trainer.accelerator.unwrap_model(trainer.model)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        scores = torch.tensor(candidate_logprobs(model, prompt, candidates))
    model.train(was_training)
    return float(scores.softmax(-1)[actions.index(goal)])


def test_grpo_steps_make_the_rewarded_action_more_likely(make_trainer):
    trainer = make_trainer(skillduet=preset("grpo").to_dict(), action_selection="choose", max_turns=3,
                           max_new_tokens_per_turn=32, max_completion_length=256, num_generations=8,
                           per_device_train_batch_size=8, max_steps=15, learning_rate=3e-3,
                           trainer_kwargs={"train_dataset": task_dataset(task_ids=["toy-1"], repeat=16)})
    before = _goal_probability(trainer, "toy-1", "open drawer")
    trainer.train()
    after = _goal_probability(trainer, "toy-1", "open drawer")
    wins = [e["env/won"] for e in trainer.state.log_history if "env/won" in e]
    assert 0.0 < before < 0.5  # the untrained policy is far from always right
    assert after > before + 0.2, (before, after, wins)  # measured: 0.30 -> 0.92 (0.003 with the reward negated)
