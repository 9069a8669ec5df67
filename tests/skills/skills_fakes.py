"""Test doubles of the skill-lifecycle tests: a scripted fake LLM backend and a trajectory factory."""

from __future__ import annotations

from typing import Callable

from skillduet_plugin.skills.types import Trajectory


class FakeBackend:
    """Answers from the request payload (like the offline backend) or from a script; counts calls."""

    def __init__(self, script: Callable[[dict], str | None] | None = None) -> None:
        self.script = script
        self.batches: list[list] = []
        self.failures = 0

    def generate(self, requests):
        self.batches.append(list(requests))
        out = []
        for r in requests:
            answer = self.script(r.payload) if self.script else default_answer(r.payload)
            if answer is None:
                self.failures += 1
            out.append(answer)
        return out


def default_answer(p: dict) -> str:
    kind = p["kind"]
    if kind == "local_pair":
        return (f"<skill>For {p['task']}: repeat the winning move "
                f"{p['success']['actions'][-1]} and avoid {p['failure']['actions'][-1]}.</skill>")
    if kind == "local_procedure":
        return f"<skill>Procedure for {p['task']}: {' then '.join(p['trajectory']['actions'])}.</skill>"
    if kind == "local_correction":
        return f"<skill>Correction for {p['task']}: do not {p['trajectory']['actions'][-1]} too early.</skill>"
    if kind == "synthesize":
        items = list(p["current"]) + [" ".join(t.split()) for t in p["new"]]
        return "<global>\n" + "\n".join(f"- {i}" for i in items) + "\n</global>"
    if kind == "compress":
        joined = " / ".join(w.split()[0] for w in p["items"])
        return f"<global>\n- Merged advice {joined} keep it short.\n</global>"
    raise AssertionError(kind)


def make_traj(traj_id: str, task_id: str = "t1", *, scope: str = "clean", success: bool = False,
              reward: float | None = None, step: int = 1, split: str = "train", actions=None,
              completion_len: int = 0, advantage: float = 0.0) -> Trajectory:
    actions = list(actions if actions is not None else [f"go to sink {traj_id}", f"take knife {traj_id}"])
    task = f"clean the {task_id} knife and put it in drawer."
    t = Trajectory(traj_id=traj_id, task_id=task_id, scope=scope, task=task, success=success,
                   reward=(1.0 if success else 0.0) if reward is None else reward, step=step, split=split,
                   advantage=advantage,
                   prompt_messages=[{"role": "system", "content": "You are an agent."},
                                    {"role": "user", "content": f"Welcome.\nYour task is to: {task}\nAct now."}],
                   responses=[f"<think>x</think><action>{a}</action>" for a in actions],
                   metadata={"actions": actions, "observations": [f"obs after {a}" for a in actions],
                             "env": "alfworld"})
    if completion_len:
        t.completion_ids = [(7 * i + len(traj_id)) % 50 + 10 for i in range(completion_len)]
        t.completion_mask = [1 if i % 3 else 0 for i in range(completion_len)]
        t.base_logps = [-1.0 - 0.1 * i for i in range(completion_len)]
    return t


def with_tokens(t: Trajectory, chat) -> Trajectory:
    """``t`` with the token view scoring needs: its prompt (no skills), one ``look`` action, base log-probs -1."""
    t.prompt_ids = chat.prompt_ids(t.prompt_messages)
    t.completion_ids = chat.encode("<action>look</action>") + [chat.eos_token_id]
    t.completion_mask = [1] * len(t.completion_ids)
    t.base_logps = [-1.0] * len(t.completion_ids)
    return t


def length_logprob_fn(contexts, responses):
    """log p = -1 + 0.001 * len(context) per token: a skill's shift is 0.001 * its inserted token count."""
    import torch

    return [torch.full((len(r),), -1.0 + 0.001 * len(c)) for c, r in zip(contexts, responses)]
