"""Choose mode inside SkillDuetGRPOTrainer: rollouts pick admissible actions, the option is validated."""

from __future__ import annotations

import pytest
import torch

from skillduet_plugin.config import ConfigError
from skillduet_plugin.rollout.choice import action_response
from trl_helpers import group_rows, small_args


def test_action_selection_is_validated(tmp_path):
    assert small_args(tmp_path).action_selection == "generate"
    assert small_args(tmp_path, action_selection="choose").action_selection == "choose"
    with pytest.raises(ConfigError, match="action_selection='pick' is invalid: allowed values are generate, choose"):
        small_args(tmp_path, action_selection="pick")


def test_choose_mode_rollouts_are_admissible_and_trained_as_recorded(make_trainer):
    from skillduet_plugin.envs.toy import ALL_ACTIONS as _ALL_ACTIONS

    trainer = make_trainer(action_selection="choose", max_new_tokens_per_turn=32, max_steps=1,
                           skillduet={"use_global": False})
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    torch.manual_seed(0)
    inputs = trainer._generate_and_score_completions(group_rows(trainer, 3))
    eps = trainer.last_rollout["episodes"]
    assert len(eps) == 4 and all(ep.num_turns >= 1 for ep in eps)
    for row, ep in enumerate(eps):
        assert all(ep.valid) and set(ep.actions) <= set(_ALL_ACTIONS)
        assert ep.responses == [action_response(a) for a in ep.actions]  # toy env: no goal in the think
        n = len(ep.tokens.completion_ids)
        assert inputs["completion_ids"][row, :n].tolist() == ep.tokens.completion_ids
        assert inputs["tool_mask"][row, :n].tolist() == ep.tokens.completion_mask
