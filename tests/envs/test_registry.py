"""A new environment is one module plus one decorator: registering it makes it playable everywhere."""

from __future__ import annotations

from typing import Any

import pytest

from skillduet_plugin import envs
from skillduet_plugin.envs.base import TextEnv
from skillduet_plugin.envs.prompts import PromptTemplates, initial_messages, turn_message
from skillduet_plugin.envs.projection import project_action
from skillduet_plugin.envs.registry import ENVS, env_names, env_spec, register_env


class _Counter(TextEnv):
    """Say the task's number to win."""

    def __init__(self, split: str) -> None:
        self.split, self._task = split, ""

    @property
    def tasks(self) -> list[str]:
        return ["c-1", "c-2"]

    def _info(self, won: bool) -> dict[str, Any]:
        return {"admissible_actions": ["say 1", "say 2"], "won": won, "score": float(won), "task_type": "count",
                "task": f"say {self._task[-1]}."}

    def reset(self, task_id: str) -> tuple[str, dict[str, Any]]:
        self._task = task_id
        return "Silence.", self._info(False)

    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        won = action == f"say {self._task[-1]}"
        return ("Yes!" if won else "No."), float(won), True, self._info(won)


@pytest.fixture()
def counter_env():
    @register_env("counter", prompts=PromptTemplates(role="You are counting."), default_panel="valid")
    def make_counter(data_dir=None, split="train", **kw):
        return _Counter(split)

    yield "counter"
    ENVS.unregister("counter")


def test_builtins_register_themselves():
    assert {"alfworld", "webshop", "toy"} <= set(env_names())
    assert env_spec("alfworld").data.default_panel == "valid_unseen" and env_spec("webshop").actions.free_text_actions


def test_a_registered_env_plays_through_every_layer(counter_env):
    from skillduet_plugin.envs.pool import EnvPool
    from skillduet_plugin.llm.offline import respond
    from skillduet_plugin.runs.config import RunConfig

    env = envs.make(counter_env, split="valid")
    assert env.split == "valid" and env.tasks == ["c-1", "c-2"]
    (msg,) = initial_messages(counter_env, task="say 1.", observation="Silence.", admissible_actions=["say 1"])
    assert msg["content"].startswith("You are counting.\nYour task is to: say 1.")
    assert "step 2" in turn_message(counter_env, observation="No.", admissible_actions=["say 2"], step=2)
    # not free text: only an admissible action is valid
    assert project_action(counter_env, "<think>x</think><action>say 1</action>", ["say 1"]) == ("say 1", True)
    assert project_action(counter_env, "<think>x</think><action>shout</action>", ["say 1"])[1] is False
    with EnvPool(counter_env, num_workers=0) as pool:
        (first,) = pool.reset(["c-2"])
        (res,) = pool.step([0], ["say 2"])
    assert first.obs == "Silence." and res.info["won"]
    traj = {"traj_id": "t", "task": "say 2.", "actions": ["say 2"], "observations": ["Yes!"], "won": True,
            "reward": 1.0}
    assert "say 2" in respond({"kind": "local_procedure", "env": counter_env, "trajectory": traj})
    assert RunConfig(env=counter_env).panel == "valid"


def test_unknown_env_lists_the_registered_ones():
    with pytest.raises(KeyError) as err:
        envs.make("atari")
    assert str(err.value).startswith("env='atari' is invalid: registered environments are alfworld, ")
