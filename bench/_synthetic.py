"""Synthetic but realistically shaped ALFWorld-style trajectories and skills for the benchmarks.

Prompts are the real first-turn prompts (``envs.prompts.initial_messages``), episodes are tokenised like the
rollout collector does (``core.conversation``: policy turns mask 1, environment turns mask 0), and skill
contexts are built by the real injector (``skills.inject``), so token counts match what training sees.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from bench import _common  # noqa: F401  (sets the offline environment variables)

_OBJECTS = "apple mug plate knife tomato bowl cup pan egg lettuce potato spatula".split()
_PLACES = "countertop cabinet fridge microwave sinkbasin diningtable drawer shelf stoveburner garbagecan".split()
_VERBS = ("go to {p} {j}", "take {o} {i} from {p} {j}", "move {o} {i} to {p} {j}", "open {p} {j}",
          "heat {o} {i} with microwave 1", "cool {o} {i} with fridge 1", "clean {o} {i} with sinkbasin 1")


def tiny_model_dir(size: str = "tiny") -> Path:
    """The tiny offline tokenizer + model of ``size``, built once into the user cache."""
    import os

    from skillduet_plugin.warmstart.tiny_model import build_tiny

    root = Path(os.environ.get("SKILLDUET_CACHE") or Path.home() / ".cache" / "skillduet")
    return build_tiny(root / "bench" / f"tiny-{size}", size=size)


def load_model(size: str = "tiny"):
    """(tokenizer, model in eval mode) of the tiny offline model of ``size``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = tiny_model_dir(size)
    tokenizer = AutoTokenizer.from_pretrained(path)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(path)
    model.eval()
    return tokenizer, model


def _action(rng: random.Random) -> str:
    return rng.choice(_VERBS).format(o=rng.choice(_OBJECTS), p=rng.choice(_PLACES), i=rng.randint(1, 3),
                                     j=rng.randint(1, 5))


def _admissible(rng: random.Random, n: int = 12) -> list[str]:
    return [_action(rng) for _ in range(n)] + ["look", "inventory"]


def _observation(rng: random.Random) -> str:
    seen = ", ".join(f"a {rng.choice(_OBJECTS)} {rng.randint(1, 3)}" for _ in range(rng.randint(2, 5)))
    return f"You arrive at {rng.choice(_PLACES)} {rng.randint(1, 5)}. On it, you see {seen}."


def make_trajectories(tokenizer: Any, n: int, *, turns: int = 3, think_words: int = 12, seed: int = 0,
                      scope: str = "pick_and_place") -> list:
    """``n`` train trajectories of one scope, each ``turns`` policy turns with environment turns between."""
    from skillduet_plugin.envs.prompts import initial_messages, turn_message
    from skillduet_plugin.core.conversation import ChatTokenizer, EpisodeTokens
    from skillduet_plugin.skills.types import Trajectory

    rng = random.Random(seed)
    chat = ChatTokenizer(tokenizer)
    out = []
    for k in range(n):
        task = f"put a {rng.choice(_OBJECTS)} in {rng.choice(_PLACES)}."
        prompt = initial_messages("alfworld", task=task, observation=_observation(rng),
                                  admissible_actions=_admissible(rng))
        episode = EpisodeTokens(chat.prompt_ids(prompt))
        messages = list(prompt)
        responses = []
        for t in range(turns):
            act = _action(rng)
            thought = " ".join(rng.choice(_OBJECTS + _PLACES + ["the", "then", "first", "I", "need"])
                               for _ in range(think_words))
            text = f"<think>{thought}</think><action>{act}</action>"
            responses.append(text)
            episode.add_policy(chat.encode(text) + [chat.eos_token_id])
            messages.append({"role": "assistant", "content": text})
            if t + 1 < turns:
                user = turn_message("alfworld", observation=_observation(rng), admissible_actions=_admissible(rng),
                                    step=t + 2)
                episode.add_env(chat.turn_ids(user))
                messages.append({"role": "user", "content": user})
        out.append(Trajectory(traj_id=f"0-{k}-0", task_id=f"task{k}", scope=scope, task=task, messages=messages,
                              prompt_messages=prompt, responses=responses, reward=float(k % 2),
                              success=bool(k % 2), advantage=(1.0 if k % 2 else -1.0),
                              prompt_ids=episode.prompt_ids, completion_ids=episode.completion_ids,
                              completion_mask=episode.completion_mask))
    return out


def make_skills(k: int, *, lines: int = 4, seed: int = 1, scope: str = "pick_and_place") -> list:
    """``k`` distinct Local skills of ``scope`` (a few procedure/correction lines each)."""
    from skillduet_plugin.skills.types import Skill

    rng = random.Random(seed)
    skills = []
    for i in range(k):
        body = []
        for _ in range(lines):
            o, p = rng.choice(_OBJECTS), rng.choice(_PLACES)
            body.append(rng.choice([f"- Procedure: go to the {p}, take the {o}, then move it to the target.",
                                    f"- Correction: open the {p} before taking the {o}.",
                                    f"- Avoid: never move an unclean {o} to the {p}."]))
        skills.append(Skill(text=f"Candidate {i}.\n" + "\n".join(body), scope=scope, kind="procedure",
                            source_traj_ids=(f"src-{i}",), step=0))
    return skills


class ContextBuilder:
    """``context_fn(traj, skill)`` of the scoring path: r's first prompt with the Local skill inserted."""

    def __init__(self, tokenizer: Any, budget_tokens: int = 256) -> None:
        from skillduet_plugin.core.conversation import ChatTokenizer

        self.chat = ChatTokenizer(tokenizer)
        self.tokenizer = tokenizer
        self.budget = budget_tokens

    def __call__(self, traj, skill) -> list[int]:
        from skillduet_plugin.skills.inject import LOCAL_HEADER, insert_sections, skill_section

        if skill is None:
            return list(traj.prompt_ids)
        section = skill_section(LOCAL_HEADER, skill.text, self.budget, self.tokenizer)
        messages = insert_sections(traj.prompt_messages, [section], task=traj.task)
        return self.chat.prompt_ids(messages)
