"""Test doubles for the verl adapter: a recording skill lifecycle, an actor worker group, TransferQueue, a rollout
server and a Global server."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

import torch

from skillduet_plugin.config import SkillDuetConfig
from skillduet_plugin.core.settings import declared_default
from skillduet_plugin.skills.inject import LOCAL_HEADER, insert_sections
from skillduet_plugin.skills.types import ExtractionResult, GlobalSkills, Skill

HINDSIGHT_HEADER = LOCAL_HEADER


def loss_settings(**changes: Any) -> dict[str, Any]:
    """The method keywords of ``make_loss_fn`` / ``skillduet_ppo_loss``: the declared ``skillduet`` defaults (as
    the trainer passes them from its config), with ``changes``."""
    settings = {key: declared_default(SkillDuetConfig, name) for key, name in (
        ("opd_coef", "opd_coef"), ("gate_beta", "gate_beta"), ("policy_loss_coef", "policy_loss_coef"),
        ("estimator", "opd_estimator"), ("topk", "opd_topk"))}
    unknown = set(changes) - set(settings)
    if unknown:
        raise TypeError(f"loss_settings: unknown keyword(s) {sorted(unknown)}; known: {sorted(settings)}")
    return {**settings, **changes}


class FakeLifecycle:
    """SkillLifecycle's surface: assigns a Local skill to chosen trajectories and records every call."""

    def __init__(self, skill_rows: set[int] | None = None, skill_text: str = "- Correction: open the box first.",
                 skill_keys: set[str] | None = None):
        self.skill_rows = skill_rows if skill_rows is not None else {0}
        self.skill_keys = skill_keys
        self.skill_text = skill_text
        self.calls: list[tuple] = []
        self.version = 0

    def extract(self, trajectories, step):
        self.calls.append(("extract", [t.traj_id for t in trajectories], step))
        return self._skills(trajectories, step)

    def analyze(self, trajectories, step):
        from skillduet_plugin.skills.extract import ExtractionStats

        self.calls.append(("analyze", [t.traj_id for t in trajectories], step))
        result = self._skills(trajectories, step)
        return result, ExtractionStats(trajectories=len(trajectories), skills=len(result.skills))

    def record_extraction(self, result, stats, step):
        self.calls.append(("record_extraction", sorted(result.assignment), stats.trajectories, step))
        return result

    def _skills(self, trajectories, step):
        """A Local skill for the trajectories chosen by id (``skill_keys``) or else by position."""
        result = ExtractionResult()
        for i, traj in enumerate(trajectories):
            if (traj.traj_id in self.skill_keys) if self.skill_keys is not None else (i in self.skill_rows):
                skill = Skill(text=self.skill_text, scope=traj.scope, kind="correction",
                              source_traj_ids=(traj.traj_id,), step=step)
                result.skills.append(skill)
                result.assignment[traj.traj_id] = skill.skill_id
        return result

    def teacher_messages(self, prompt_messages, *, task, scope, local_skill, global_version=None):
        self.calls.append(("teacher_messages", global_version))
        return insert_sections(prompt_messages, [f"{LOCAL_HEADER}\n{local_skill.text}"], task=task)

    def score(self, skills, trajectories, logprob_fn, teacher_logps=None, assignment=None, record=True):
        if record:
            self.teacher_logps, self.assignment = teacher_logps, assignment
        contexts = [t.prompt_ids for t in trajectories]
        responses = [t.completion_ids for t in trajectories]
        values = logprob_fn(contexts, responses)
        self.calls.append(("score" if record else "score_unrecorded", [s.skill_id for s in skills],
                           [t.advantage for t in trajectories], values))
        # a Strength that depends on the values, so a log-prob gap shows as a Strength gap
        return {s.skill_id: {"strength": float(sum(v.sum() for v in values)), "utility": 0.0} for s in skills}

    def end_step(self, step):
        self.calls.append(("end_step", step))
        if step % 10 == 0:
            self.version += 1

    def global_for(self, scope):
        return GlobalSkills(scope=scope, version=self.version or None, text=f"global v{self.version} of {scope}")

    def snapshot(self, directory):
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, "fake.json"), "w") as f:
            json.dump({"version": self.version, "calls": len(self.calls)}, f)
        return directory

    def restore(self, directory):
        with open(os.path.join(directory, "fake.json")) as f:
            self.version = json.load(f)["version"]
        self.calls.append(("restore", directory))

    def metrics(self):
        return {"globals": float(self.version)}


class FakeServer:
    """Async ``generate`` of verl's server manager returning scripted turns, recording every request.

    ``logps[k]`` is the sampling log-prob of every token of turn k (default -0.5); ``steps[k]``, when given, is the
    global step of the weights that served turn k (``TokenOutput.extra_fields["global_steps"]``)."""

    def __init__(self, turns: list[list[int]], logps: list[float] | None = None, steps: list[int] | None = None):
        self.turns, self.logps, self.steps = list(turns), list(logps or []), list(steps or [])
        self.calls: list[dict] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        self.calls.append({"request_id": request_id, "prompt_ids": list(prompt_ids),
                           "sampling_params": dict(sampling_params)})
        k = len(self.calls) - 1
        ids = self.turns.pop(0)
        logp = self.logps[k] if k < len(self.logps) else -0.5
        extra = {"global_steps": self.steps[k]} if k < len(self.steps) else {}
        return TokenOutput(token_ids=ids, log_probs=[logp] * len(ids), extra_fields=extra)


class FakeGlobals:
    """The Global server's client: ``get(scope)`` from ``lookup`` (default: version 3 of ``text``), scopes recorded."""

    def __init__(self, text: str = "", lookup=None):
        self.text, self.lookup = text, lookup
        self.scopes: list[str] = []

    async def get(self, scope):
        self.scopes.append(scope)
        return self.lookup(scope) if self.lookup is not None else GlobalSkills(scope=scope, version=3, text=self.text)


TOY = "skillduet_plugin.envs.toy"


def toy_agent_config(*overrides: str):
    """A composed verl config whose ``skillduet_agent`` loop plays the toy environment (64-token turns, 3 turns,
    ``response_length`` 400); ``overrides`` come last."""
    from skillduet_plugin.main_ppo import compose

    return compose(["trainer.plugins=[skillduet]", "actor_rollout_ref.rollout.response_length=400",
                    "skillduet.env.name=toy", f"skillduet.env.factory={TOY}:make_toy",
                    f"skillduet.env.initial_messages_fn={TOY}:toy_initial_messages",
                    f"skillduet.env.turn_message_fn={TOY}:toy_turn_message",
                    f"skillduet.env.project_action_fn={TOY}:toy_project_action",
                    "skillduet.env.max_new_tokens_per_turn=64", "skillduet.env.max_turns=3", *overrides])


def run_agent_loop(tokenizer, server, globals_, cfg, task_id: str = "toy-3", **kwargs):
    """One ``SkillDuetAgentLoop.run`` against ``server`` and ``globals_`` (``kwargs`` join the dataset row)."""
    import asyncio

    from verl.experimental.agent_loop.agent_loop import DictConfigWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from skillduet_plugin.integrations.verl.agent_loop import SkillDuetAgentLoop

    async def go():
        loop = SkillDuetAgentLoop(trainer_config=DictConfigWrap(cfg), server_manager=server, tokenizer=tokenizer,
                                  processor=None, dataset_cls=RLHFDataset, data_config=DictConfigWrap(cfg.data),
                                  hf_model_type="qwen3")
        loop.global_client = globals_
        return await loop.run({"temperature": 1.0, "top_p": 1.0, "logprobs": True},
                              raw_prompt=[{"role": "user", "content": "toy task"}],
                              extra_info={"task_id": task_id, "split": "train", "index": 0}, **kwargs)

    return asyncio.run(go())


def position_logprobs(length: int) -> torch.Tensor:
    """The fake actor's log-probs: position j of a sequence holds -0.001 * (j + 1)."""
    return -0.001 * torch.arange(1, length + 1, dtype=torch.float32)


class FakePrefillClient:
    """verl's ``LLMServerClient.generate`` for prefill requests, in vLLM's prompt_logprobs contract, with the
    fake actor's values shifted by ``offset`` (0: a server serving the actor's weights)."""

    def __init__(self, offset: float = 0.0):
        self.offset, self.requests = offset, []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        self.requests.append((list(prompt_ids), dict(sampling_params)))
        values = (position_logprobs(len(prompt_ids) - 1) + self.offset).tolist()
        return TokenOutput(token_ids=[0], log_probs=[0.0], extra_fields={
            "prompt_ids": [[t] for t in prompt_ids[1:]] + [[0]], "prompt_logprobs": [[v] for v in values] + [[0.0]]})


class FakeActorGroup:
    """``compute_log_prob`` over nested input_ids; records what it was asked."""

    def __init__(self, dp_size: int = 1):
        self._dispatch_info = {"actor": list(range(dp_size))}
        self.requests: list[Any] = []

    def compute_log_prob(self, td):
        self.requests.append(td)
        rows = [position_logprobs(int(x.numel())) for x in td["input_ids"].unbind()]
        return {"log_probs": torch.nested.as_nested_tensor(rows, layout=torch.jagged)}


@dataclass
class FakeBatch:
    keys: list[str]
    tags: list[dict] = field(default_factory=list)
    partition_id: str = "train"


class MemoryTQ:
    """In-memory stand-in for the TransferQueue fields of one batch."""

    def __init__(self, fields: dict[str, Any]):
        self.fields = dict(fields)

    def get(self, batch, names):
        from tensordict import TensorDict

        from skillduet_plugin.integrations.verl.batch import nested

        out = {}
        for name in names:
            value = self.fields[name]
            out[name] = nested(value) if isinstance(value, list) and isinstance(value[0], torch.Tensor) else value
        td = TensorDict({k: v for k, v in out.items() if isinstance(v, torch.Tensor)}, batch_size=len(batch.keys))
        for k, v in out.items():
            if not isinstance(v, torch.Tensor):
                td[k] = _stack(v)
        return td

    def put(self, batch, td):
        for key in td.keys():
            self.fields[key] = td[key]
        return batch


def _stack(values):
    from tensordict import NonTensorStack

    return NonTensorStack(*values)
