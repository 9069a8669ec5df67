"""Test doubles for the verl adapter: a recording skill lifecycle, an actor worker group, TransferQueue."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

import torch

from skillduet_plugin.skills.inject import LOCAL_HEADER, insert_sections
from skillduet_plugin.skills.types import ExtractionResult, GlobalSkills, Skill

HINDSIGHT_HEADER = LOCAL_HEADER


class FakeLifecycle:
    """SkillLifecycle's surface: assigns a Local skill to chosen trajectories and records every call."""

    def __init__(self, skill_rows: set[int] | None = None, skill_text: str = "- Correction: open the box first."):
        self.skill_rows = skill_rows if skill_rows is not None else {0}
        self.skill_text = skill_text
        self.calls: list[tuple] = []
        self.version = 0

    def extract(self, trajectories, step):
        self.calls.append(("extract", [t.traj_id for t in trajectories], step))
        result = ExtractionResult()
        for i, traj in enumerate(trajectories):
            if i in self.skill_rows:
                skill = Skill(text=self.skill_text, scope=traj.scope, kind="correction",
                              source_traj_ids=(traj.traj_id,), step=step)
                result.skills.append(skill)
                result.assignment[traj.traj_id] = skill.skill_id
        return result

    def teacher_messages(self, prompt_messages, *, task, scope, local_skill, global_version=None):
        self.calls.append(("teacher_messages", global_version))
        return insert_sections(prompt_messages, [f"{LOCAL_HEADER}\n{local_skill.text}"], task=task)

    def score(self, skills, trajectories, logprob_fn):
        contexts = [t.prompt_ids for t in trajectories]
        responses = [t.completion_ids for t in trajectories]
        values = logprob_fn(contexts, responses)
        self.calls.append(("score", [s.skill_id for s in skills], [t.advantage for t in trajectories], values))
        return {s.skill_id: {"strength": 0.1} for s in skills}

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


def position_logprobs(length: int) -> torch.Tensor:
    """The fake actor's log-probs: position j of a sequence holds -0.001 * (j + 1)."""
    return -0.001 * torch.arange(1, length + 1, dtype=torch.float32)


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
