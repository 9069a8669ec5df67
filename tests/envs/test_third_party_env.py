"""A third-party environment, defined in this one module (nothing under skillduet_plugin/ names it), plays through
``skillduet train``, the TRL trainer and verl's agent loop; an installed package adds one through the
``skillduet.envs`` entry points; no environment registration names a module above envs/.

This is the recipe of docs/ARCHITECTURE.md "How to add an environment": a TextEnv, a factory with
``@register_env``, and optionally what other layers want from it, registered by those layers against its name.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from skillduet_plugin.envs.base import TextEnv
from skillduet_plugin.envs.prompts import PromptTemplates
from skillduet_plugin.envs.registry import ENTRY_POINT_GROUP, ENVS, env_names, env_spec, register_env

NAME = "lamps"
ROOT = Path(__file__).resolve().parents[2]


class LampsEnv(TextEnv):
    """Switch on the lamp the task names (two turns at most: a wrong switch costs a turn)."""

    resets: list[str] = []  # every task reset and every (task, action, won) step, in every instance: what the
    steps: list[tuple[str, str, bool]] = []  # tests check the env played and scored

    def __init__(self, split: str = "train", max_steps: int = 2) -> None:
        self.split, self.max_steps = split, max_steps
        self._task, self._turn = "", 0

    @property
    def tasks(self) -> list[str]:
        return ["lamp-red", "lamp-blue", "lamp-green"]

    def _info(self, won: bool) -> dict[str, Any]:
        return {"admissible_actions": ["switch red", "switch blue", "switch green"], "won": won,
                "score": float(won), "task_type": "lamps", "task": f"switch on the {self._task[5:]} lamp."}

    def reset(self, task_id: str) -> tuple[str, dict[str, Any]]:
        self._task, self._turn = task_id, 0
        LampsEnv.resets.append(task_id)
        return "Three lamps are off.", self._info(False)

    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        self._turn += 1
        won = action == f"switch {self._task[5:]}"
        LampsEnv.steps.append((self._task, action, won))
        return ("It lights up." if won else "Wrong lamp."), float(won), won or self._turn >= self.max_steps, \
            self._info(won)


def make_lamps(data_dir: str | None = None, split: str = "train", **kwargs: Any) -> LampsEnv:
    """The factory (``skillduet.env.factory`` / ``envs.make(NAME)``)."""
    return LampsEnv(split, **kwargs)


def register() -> None:
    """What an installed package's ``skillduet.envs`` entry point runs."""
    register_env(NAME, make_lamps, prompts=PromptTemplates(role="You are an electrician."), default_panel="test")


@pytest.fixture()
def lamps():
    register()
    LampsEnv.resets.clear()
    LampsEnv.steps.clear()
    yield NAME
    ENVS.unregister(NAME)


def lamp_won(task_id: str, actions: list[str]) -> bool:
    """The env's own verdict on an episode, recomputed: its last action switched the task's lamp."""
    return bool(actions) and actions[-1] == f"switch {task_id[5:]}"


def test_entry_point_adds_an_environment(monkeypatch):
    """A fake installed package: its entry point is loaded on the first lookup and registers the env."""
    module = Path(__file__).stem
    spec = importlib.util.spec_from_file_location(module, __file__)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    monkeypatch.setitem(sys.modules, module, loaded)
    entry = importlib.metadata.EntryPoint(name=NAME, value=f"{module}:register", group=ENTRY_POINT_GROUP)

    def entry_points(group: str):
        return [entry] if group == ENTRY_POINT_GROUP else []

    builtins = set(env_names())  # the built-in packages are imported (and registered) once, here
    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    monkeypatch.setattr(ENVS, "_discovered", False)  # as in a fresh process: discovery runs on the next lookup
    try:
        assert set(env_names()) == builtins | {NAME}
        assert env_spec(NAME).factory(split="test").tasks[0] == "lamp-red"
        ENVS.unregister(NAME)  # negative control: without the entry point, no such environment
        monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [])
        monkeypatch.setattr(ENVS, "_discovered", False)
        assert set(env_names()) == builtins
    finally:
        ENVS.unregister(NAME)


_UPWARD = re.compile(r"skillduet_plugin\.(llm|runs|skills|rollout|integrations|reporting|commands|config)\b")


def upward_strings(source: str) -> list[str]:
    """String constants of a module that name a module above envs/ (a "module:attr" target, say)."""
    return [node.value for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and _UPWARD.search(node.value)
            and not node.value.lstrip().startswith(("A ", "The "))]


def test_no_environment_names_a_module_above_it():
    """Import-linter sees imports, not strings: an env's "module:attr" pointing upward is caught here."""
    found = {str(p.relative_to(ROOT)): upward_strings(p.read_text())
             for p in (ROOT / "skillduet_plugin" / "envs").rglob("*.py")}
    assert {p: s for p, s in found.items() if s} == {}
    for name in env_names():
        spec = env_spec(name)
        assert not _UPWARD.search(spec.target), (name, spec.target)
    # negative control: the string the envs used to hold is found
    assert upward_strings('X = dict(offline_rules="skillduet_plugin.llm.offline_webshop:RULES")')


@pytest.mark.slow
def test_skillduet_train_plays_it(lamps, tmp_path, capsys):
    from skillduet_plugin.cli import main

    run = tmp_path / "run"
    rc = main(["train", f"env={lamps}", "steps=1", "tasks_per_step=1", "num_generations=2", "train_tasks=2",
               "eval_tasks=2", "eval_training_tasks=0", "eval_samples=0", "eval_before=false", "max_turns=2",
               "teacher_check_samples=2", "warm_start.enabled=false", "save_steps=0", "threads=1",
               "--output-dir", str(run)])
    out = capsys.readouterr()
    assert rc == 0, out.err[-2000:]
    assert "panel (test" in out.out + out.err  # its own default panel
    # its episodes were played and scored by the env: 2 rollouts of the step's task, each judged by the env's rule
    episodes = [json.loads(line) for line in (run / "trajectories" / "step_000001.jsonl").read_text().splitlines()]
    assert len(episodes) == 2 and {e["task_id"] for e in episodes} <= set(LampsEnv().tasks)
    for e in episodes:
        assert e["scope"] == "lamps" and e["metadata"]["env"] == NAME
        assert e["success"] == lamp_won(e["task_id"], e["metadata"]["actions"]) and e["reward"] == float(e["success"])
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    [metrics] = [r for r in records if "env/won" in r]
    won = sum(e["success"] for e in episodes) / 2
    assert metrics["step"] == 1 and metrics["success/lamps"] == metrics["env/won"] == won
    # the panel: its 2 test tasks, scored as the env's task type
    panel = json.loads((run / "eval" / "after.json").read_text())["conditions"]["none"]
    assert panel["episodes"] == 2 and panel["per_type_n"] == {"lamps": 2}
    # resets: 2 rollouts + the teacher check's 2 with and 2 without the Local skill + 2 panel games
    assert len(LampsEnv.resets) == 8
    assert set(LampsEnv.resets) == {e["task_id"] for e in episodes} | set(panel["outcomes"])


@pytest.mark.slow
def test_the_trl_trainer_plays_it(lamps, tmp_path, tiny_model_dir):
    pytest.importorskip("trl")
    import torch

    from skillduet_plugin.integrations.trl import CPU_SAFE_DEFAULTS, SkillDuetGRPOConfig, SkillDuetGRPOTrainer
    from skillduet_plugin.integrations.trl import task_dataset

    torch.manual_seed(0)
    args = SkillDuetGRPOConfig(**{**CPU_SAFE_DEFAULTS, "output_dir": str(tmp_path), "num_generations": 2,
                                  "per_device_train_batch_size": 2, "max_completion_length": 96, "max_steps": 1,
                                  "env_name": lamps, "max_turns": 2, "max_new_tokens_per_turn": 8,
                                  "save_strategy": "no", "seed": 0, "disable_tqdm": True})
    trainer = SkillDuetGRPOTrainer(model=str(tiny_model_dir), args=args, train_dataset=task_dataset(LampsEnv()))
    trainer.train()
    assert trainer.state.global_step == 1
    # its episodes were played and scored: one task x 2 generations, the won metric is the env's verdict
    [logged] = [r for r in trainer.state.log_history if "env/won" in r]
    assert len(LampsEnv.resets) == 2 and LampsEnv.resets[0] == LampsEnv.resets[1] in LampsEnv().tasks
    assert {task for task, _, _ in LampsEnv.steps} <= {LampsEnv.resets[0]}
    assert logged["env/won"] == sum(won for _, _, won in LampsEnv.steps) / 2  # a win ends its episode


def test_verl_agent_loop_plays_it(lamps, tiny_tokenizer, monkeypatch):
    pytest.importorskip("verl")
    spec = importlib.util.spec_from_file_location("verl_fakes_for_lamps", ROOT / "tests" / "verl" / "fakes.py")
    fakes = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, fakes)  # its dataclasses look their module up
    spec.loader.exec_module(fakes)
    from skillduet_plugin.core.conversation import ChatTokenizer
    from skillduet_plugin.main_ppo import compose

    chat = ChatTokenizer(tiny_tokenizer)
    turns = [chat.encode("<think>red?</think><action>switch red</action>") + [chat.eos_token_id],
             chat.encode("<think>blue</think><action>switch blue</action>") + [chat.eos_token_id]]
    cfg = compose(["trainer.plugins=[skillduet]", "actor_rollout_ref.rollout.response_length=400",
                   f"skillduet.env.name={lamps}", "skillduet.env.max_new_tokens_per_turn=64",
                   "skillduet.env.max_turns=2"])
    server, globals_ = fakes.FakeServer(turns), fakes.FakeGlobals("- Read the lamp's colour in the task.")
    out = fakes.run_agent_loop(tiny_tokenizer, server, globals_, cfg, task_id="lamp-blue")
    assert len(server.calls) == 2  # the wrong lamp costs a turn, the right one ends the episode
    assert "You are an electrician." in tiny_tokenizer.decode(server.calls[0]["prompt_ids"])
    assert globals_.scopes == ["lamps"]
    record = out.extra_fields["skillduet"]
    assert record["actions"] == ["switch red", "switch blue"] and record["won"] is True
    assert out.reward_score == 1.0
