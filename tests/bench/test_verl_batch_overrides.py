"""The verl step benchmark's larger steps (``--workers``, ``--prompts``, ``--rollouts``): the overrides that reach
``main_ppo`` and the refusal of a step that does not split over the workers, before any run starts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.verl_step_overhead import batch_overrides  # noqa: E402


def test_defaults_add_nothing():
    assert batch_overrides(1, None, None) == []


def test_two_workers_and_a_paper_shaped_group():
    got = batch_overrides(2, 16, 8)
    assert got == ["trainer.n_gpus_per_node=2", "+ray_kwargs.ray_init.num_gpus=2", "ray_kwargs.ray_init.num_cpus=4",
                   "data.train_batch_size=16", "actor_rollout_ref.actor.ppo_mini_batch_size=16",
                   "actor_rollout_ref.rollout.n=8"]


@pytest.mark.parametrize("args, field", [((2, 3, 1), "--workers 2"), ((0, 4, 2), "--workers 0"),
                                         ((1, 4, 0), "--rollouts 0"),
                                         ((3, None, None), "--prompts 4 x --rollouts 2 trajectories")])
def test_a_step_that_cannot_run_is_refused_with_the_flags(args, field):
    with pytest.raises(SystemExit, match=field):
        batch_overrides(*args)
