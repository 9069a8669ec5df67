"""The warm start's reading design (``warm_start.design=reading``): cloning data from which a model learns to act on
what a Local skill *says*, not on whether a section is there.

In the search design (``warmstart.episodes.plan_skill_sections``) a clone can do well by ignoring a skill's words:
most of its Local skills are true, and the plain search is right most of the time. Here, per cloning game:

- a **true** episode: the offline analyzer's Local skill written from another expert episode of the game (its
  first line names where the target was, exactly as the actions spell it: ``go to cabinet 2 and take mug 1 from
  cabinet 2``), played by the expert that goes there first;
- ``counterfactuals`` **stand-in** episodes: the same skill written as if the target (and, for ``look``, the lamp)
  had been in other receptacles of the same room that could hold it (the donor episode with those names swapped,
  ``swapped``), played by the expert that goes first where that text says, then searches;
- a **no-skill** episode: the plain search;
- optionally (``global_episodes``) an episode with a Global of the task type written from other games' skills,
  played by the plain search (a Global says nothing about where this game's objects are).

So where the expert goes first is predictable only from the skill's words. The games are the warm start's own
split (``clone_split``: generated on first use when the run uses generated games, never the RL games nor the
evaluation panel), taken round-robin over task types. An environment takes part by registering its
:class:`ReadingParts` (ALFWorld's is registered below).
"""

from __future__ import annotations

import concurrent.futures
import math
import multiprocessing as mp
import random
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from skillduet_plugin.core.registry import Registry
from skillduet_plugin.envs import make
from skillduet_plugin.envs.alfworld import expert as alfworld_expert
from skillduet_plugin.envs.alfworld.generator import ensure_default_data
from skillduet_plugin.envs.registry import env_spec, load_environments
from skillduet_plugin.warmstart.episodes import ExpertRecord, SkillPlan, analyzer_skill, play_expert, synthesized_global

#: Turn limit of the donor episodes the Local skills are written from (ALFWorld's own episode limit): a skill
#: needs a donor that found the target, however long its search took.
DONOR_TURNS = 50
#: Search seeds of the episodes of one game: the donor, the true-skill episode, the no-skill episode, then the
#: stand-in and Global episodes.
DONOR_SEED, TRUE_SEED, NONE_SEED, FIRST_OTHER_SEED = 1, 2, 3, 4


@dataclass(frozen=True)
class ReadingParts:
    """What the reading design needs from an environment.

    Attributes:
        standins: ``(task_id, actions, first_admissible, k, rng) -> [name swaps]``: up to ``k`` mappings that swap
            where an episode with these actions found its target for stand-ins of the same room (and back).
        generate: ``(split, n_per_type) -> data root``: generated games of a split, made once and cached; None when
            the environment generates none (a run then names a ``data_dir`` that holds the split).
    """

    standins: Callable[[str, Sequence[str], Sequence[str], int, random.Random], list[dict[str, str]]]
    generate: Callable[[str, int], Path] | None = None


#: Environment name -> its reading parts; the first lookup loads the installed environments, which may register
#: theirs.
READING_ENVS: Registry[ReadingParts] = Registry("env", "environments with the reading design",
                                                discover=load_environments)


def register_reading_env(env: str, parts: ReadingParts, *, replace: bool = False) -> ReadingParts:
    """Let ``warm_start.design=reading`` warm-start a model for ``env``."""
    return READING_ENVS.register(env, parts, replace=replace)


def swapped(record: ExpertRecord, mapping: dict[str, str]) -> ExpertRecord:
    """``record`` with the names of ``mapping`` swapped in its actions, observations and admissible actions (whole
    names only: ``cabinet 2`` never touches ``cabinet 21``)."""
    if not mapping:
        return record
    names = sorted(mapping, key=len, reverse=True)
    pattern = re.compile(r"(?<![\w])(" + "|".join(re.escape(n) for n in names) + r")(?!\d)")

    def sub(text: str) -> str:
        return pattern.sub(lambda m: mapping[m.group(1)], text)

    return replace(record, actions=[sub(a) for a in record.actions],
                   observations=[sub(o) for o in record.observations],
                   admissible=[[sub(a) for a in adm] for adm in record.admissible])


def round_robin(tasks: Sequence[str], scope_of: Callable[[str], str]) -> list[str]:
    """Tasks interleaved over their types (stable within a type)."""
    by_scope: dict[str, list[str]] = {}
    for t in tasks:
        by_scope.setdefault(scope_of(t), []).append(t)
    queues = list(by_scope.values())
    out: list[str] = []
    for k in range(max((len(q) for q in queues), default=0)):
        out.extend(q[k] for q in queues if k < len(q))
    return out


def clone_env_kwargs(env_name: str, env_kwargs: dict[str, Any], games: int) -> dict[str, Any]:
    """The environment keywords of the warm start's own split (``env_kwargs`` as a run builds them for that split),
    its games generated on first use (``ceil(games / task types)`` per type) when ``data_dir`` names none."""
    kw = dict(env_kwargs)
    parts = READING_ENVS.get(env_name)
    if kw.get("data_dir") is None and parts.generate is not None:
        types = kw.get("task_types") or env_spec(env_name).report.scope_order or ("",)
        kw["data_dir"] = str(parts.generate(str(kw["split"]), math.ceil(games / len(types))))
    return kw


@dataclass
class ReadingEpisode:
    """One episode of the reading design: the expert's record, its skill section (None: none) and its kind
    (``true``, ``standin``, ``none`` or ``global``)."""

    record: ExpertRecord
    plan: SkillPlan | None
    kind: str


def game_episodes(env: Any, task: str, env_name: str, *, max_turns: int, counterfactuals: int,
                  seed: int = 0) -> list[ReadingEpisode]:
    """One game's true-skill episode, up to ``counterfactuals`` stand-in episodes and its no-skill episode (only
    the last when the donor episode never found the target); a function of the game and the seed alone."""
    parts = READING_ENVS.get(env_name)
    out: list[ReadingEpisode] = []
    donor = play_expert(env, task, max_turns=DONOR_TURNS, seed=DONOR_SEED)
    text = analyzer_skill(donor, env_name) if donor.won else ""
    if text:
        rec = play_expert(env, task, max_turns=max_turns, seed=TRUE_SEED, hint=donor.actions)
        out.append(ReadingEpisode(rec, SkillPlan("local", text, -1), "true"))
        rng = random.Random(f"{seed}/{task}")
        for j, mapping in enumerate(parts.standins(task, donor.actions, donor.admissible[0], counterfactuals, rng)):
            fake = swapped(donor, mapping)
            rec = play_expert(env, task, max_turns=max_turns, seed=FIRST_OTHER_SEED + j, hint=fake.actions)
            out.append(ReadingEpisode(rec, SkillPlan("local", analyzer_skill(fake, env_name), -1), "standin"))
    out.append(ReadingEpisode(play_expert(env, task, max_turns=max_turns, seed=NONE_SEED), None, "none"))
    return out


def _play_games(env_name: str, env_kwargs: dict[str, Any], tasks: Sequence[str],
                kw: dict[str, Any]) -> list[ReadingEpisode]:
    """:func:`game_episodes` of ``tasks`` in a worker process, on an environment of its own."""
    env = make(env_name, **env_kwargs)
    try:
        return [e for t in tasks for e in game_episodes(env, t, env_name, **kw)]
    finally:
        env.close()


def reading_episodes(env: Any, tasks: Sequence[str], env_name: str, *, max_turns: int, counterfactuals: int,
                     global_episodes: int = 0, skill_token_budget: int = 160, seed: int = 0, workers: int = 1,
                     env_kwargs: dict[str, Any] | None = None) -> list[ReadingEpisode]:
    """:func:`game_episodes` of every game of ``tasks`` (played by ``workers`` processes, each on an environment
    built from ``env_kwargs``, when both are given: the same episodes in the same order as one process), then
    ``global_episodes`` per game with a Global of its task type (from the true skills of two other games of the
    type, or the one there is) and the plain search."""
    kw = dict(max_turns=max_turns, counterfactuals=counterfactuals, seed=seed)
    if workers > 1 and env_kwargs is not None and len(tasks) > 1:
        size = math.ceil(len(tasks) / workers)
        chunks = [list(tasks[i:i + size]) for i in range(0, len(tasks), size)]
        with concurrent.futures.ProcessPoolExecutor(len(chunks), mp_context=mp.get_context("spawn")) as pool:
            out = [e for part in pool.map(_play_games, *zip(*[(env_name, env_kwargs, c, kw) for c in chunks]))
                   for e in part]
    else:
        out = [e for t in tasks for e in game_episodes(env, t, env_name, **kw)]
    true_skills = {e.record.task_id: (e.record.scope, e.plan.text) for e in out if e.kind == "true" and e.plan}
    rng = random.Random(seed)
    for t in tasks:
        scope = true_skills[t][0] if t in true_skills else None
        others = [text for o, (s, text) in true_skills.items() if s == scope and o != t]
        for g in range(global_episodes if others else 0):
            text = synthesized_global(rng.sample(others, min(2, len(others))), skill_token_budget)
            rec = play_expert(env, t, max_turns=max_turns, seed=FIRST_OTHER_SEED + counterfactuals + g)
            out.append(ReadingEpisode(rec, SkillPlan("global", text, -1), "global"))
    return out


def reading_data(settings: dict[str, Any], make_env: Callable[[int], Any], workers: int = 1) -> list[ReadingEpisode]:
    """The reading design's episodes for the warm start's ``settings`` (``warmstart.cache``): the games of its own
    split (``settings["reading"]``, played by ``workers`` processes), then the first ``settings["games"]`` of the
    training split (0: none)."""
    s, r = settings, settings["reading"]
    kw = dict(max_turns=s["max_turns"], counterfactuals=r["counterfactuals"], global_episodes=r["global_episodes"],
              skill_token_budget=s["skill_token_budget"], seed=s["seed"])
    env_kwargs = clone_env_kwargs(s["env"], r["env_kwargs"], r["games"])
    env = make(s["env"], **env_kwargs)
    try:
        tasks = round_robin(list(env.tasks), getattr(env, "task_type", lambda t: ""))[:r["games"]]
        out = reading_episodes(env, tasks, s["env"], workers=workers, env_kwargs=env_kwargs, **kw)
    finally:
        env.close()
    if s["games"]:
        env = make_env(s["games"])
        try:
            out += reading_episodes(env, list(env.tasks)[:s["games"]], s["env"], **kw)
        finally:
            env.close()
    return out


def describe(episodes: Sequence[ReadingEpisode]) -> str:
    """``N episodes (true T, stand-in S, none N, global G; W won)`` for the warm start's log."""
    counts = {k: sum(e.kind == k for e in episodes) for k in ("true", "standin", "none", "global")}
    won = sum(e.record.won for e in episodes)
    return (f"{len(episodes)} reading-design episodes (same game's skill {counts['true']}, stand-in skill "
            f"{counts['standin']}, none {counts['none']}, Global {counts['global']}; {won} won)")


register_reading_env("alfworld", ReadingParts(standins=alfworld_expert.standins,
                                              generate=lambda split, n: ensure_default_data(split, n)))
