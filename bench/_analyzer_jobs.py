"""The analyzer requests the skill-quality benchmark sends: real ALFWorld games (generated, every task type), one
successful attempt (the searching expert) and one failed attempt (seeded random admissible actions) per game, laid
out exactly as a training step asks the analyzer (``skills.extract.plan_jobs``: a pair prompt for a game with both,
a procedure or a correction prompt otherwise), with what a good skill of that game would name: the task's target
receptacle and the actions the successful attempt took."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path

from skillduet_plugin.skills.extract import LocalJob, plan_jobs
from skillduet_plugin.skills.types import Trajectory

#: prompt kinds in the order they are cycled through, so every kind is asked about equally often
KINDS = ("local_pair", "local_procedure", "local_correction")
_TARGET = re.compile(r"\b(?:in|on|under|with)\s+(?:the\s+)?([a-z]+)\.?\s*$")


@dataclass
class AnalyzerCase:
    """One analyzer request of the benchmark and what a skill for it should name."""

    job: LocalJob
    target: str                 # the task's receptacle ("dresser"; the lamp for look tasks)
    actions: tuple[str, ...]    # the successful attempt's actions, ids left out ("take cd", "go to desk")


def _trajectory(traj_id: str, record, *, success: bool, step: int = 1) -> Trajectory:
    obs = list(record.observations)
    return Trajectory(traj_id=traj_id, task_id=record.task_id, task=record.task, scope=record.scope, step=step,
                      success=success, reward=float(success), split="train",
                      metadata={"env": "alfworld", "actions": list(record.actions), "observations": obs[1:],
                                "initial_observation": obs[0]})


def _random_record(env, task_id: str, seed: int, turns: int):
    from skillduet_plugin.warmstart.episodes import play_expert  # lazy: imports torch

    rng = random.Random(seed)

    def act(obs, info, turn):
        options = [a for a in info.get("admissible_actions") or ["look"] if a not in ("inventory", "help")]
        return rng.choice(options or ["look"])

    return play_expert(env, task_id, max_turns=turns, expert=act)


def without_ids(action: str) -> str:
    """An action as advice names it: ``take cd 2 from desk 1`` -> ``take cd``."""
    words = [w for w in action.lower().split() if not w.isdigit()]
    return " ".join(words[:2] if words and words[0] != "go" else words[:3])


def build_cases(games_dir: str | Path, n: int = 50, *, seed: int = 0, turns: int = 8,
                render_tokens: int = 1200) -> list[AnalyzerCase]:
    """``n`` analyzer requests over the generated games under ``games_dir`` (split ``train``), kinds cycled."""
    from skillduet_plugin.envs import make  # lazy: imports the alfworld engine
    from skillduet_plugin.warmstart.episodes import play_expert  # lazy: imports torch

    env = make("alfworld", data_dir=str(games_dir), split="train")
    cases: list[AnalyzerCase] = []
    tasks = list(env.tasks)
    i = 0
    while len(cases) < n and i < 4 * n:
        task_id = tasks[i % len(tasks)]
        kind = KINDS[len(cases) % len(KINDS)]
        won = play_expert(env, task_id, max_turns=turns * 3, seed=i)
        lost = _random_record(env, task_id, seed + i, turns)
        i += 1
        if not won.won or lost.won:
            continue
        trajs = {"local_pair": [_trajectory(f"s{i}", won, success=True), _trajectory(f"f{i}", lost, success=False)],
                 "local_procedure": [_trajectory(f"s{i}", won, success=True)],
                 "local_correction": [_trajectory(f"f{i}", lost, success=False)]}[kind]
        jobs, _ = plan_jobs(trajs, env="alfworld", render_tokens=render_tokens)
        match = _TARGET.search(won.task.lower())
        cases.append(AnalyzerCase(jobs[0], match.group(1) if match else "",
                                  tuple(dict.fromkeys(without_ids(a) for a in won.actions))))
    env.close() if hasattr(env, "close") else None
    return cases


def names_game(text: str, case: AnalyzerCase) -> bool:
    """Whether a skill names the game's target receptacle or an action the successful attempt took."""
    words = " ".join(re.findall(r"[a-z]+", text.lower().replace(" the ", " ")))
    if case.target and re.search(r"\b" + re.escape(case.target) + r"\b", words):
        return True
    return any(re.search(r"\b" + re.escape(a) + r"\b", words) for a in case.actions if len(a.split()) >= 2)
