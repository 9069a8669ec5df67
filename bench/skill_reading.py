"""Probe: does a warm-started model read a Local skill? On each game of a panel, another expert episode of the same
game (seed 1) gives the analyzer's Local skill (``warmstart.episodes.analyzer_skill``: its first line names where
the target was taken, and for ``look`` where the lamp was used, exactly as the actions name them); the expert
that acts on it (``hint``) plays the episode that is teacher-forced. Each turn scores every
admissible action (choose mode) with the first prompt holding no skill section, that Local skill under
``## Hindsight skill`` (same game), the Local skill of another game of the task type (same form, wrong
content) or length-matched neutral text. A model that reads skills puts more probability on the hinted expert's
action with the same-game skill than without or with the others. ``gaps`` gives the same-game skill minus each
control with a paired 95% bootstrap interval over the games, the ceiling (the largest gap a perfect reader could
show: 100 minus the control's accuracy) and whether all three clear the gate (20 points), over all turns and at
the deciding turn (the first where the skill-following expert departs from the plain search). ``--success`` adds
greedy success with no skill and with each game's own Local skill (student and OPD teacher) on the RL games and
the panel.

    python bench/skill_reading.py                                   # the demo's warm start (cached), valid_unseen
    python bench/skill_reading.py --set warm_start.design=reading   # the reading design's clone
    python bench/skill_reading.py --set warm_start.design=reading --panel-per-type 10 --success
    python bench/skill_reading.py --config examples/cpu_reading.yaml --panel-per-type 10 --success
    python bench/skill_reading.py --panel train                     # the games the demo's clone was cloned on
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import _common  # noqa: E402  (offline environment variables; the shared probe helpers)

CONDITIONS = ("none", "same_game", "other_game", "neutral")
#: The gate of a model that reads skills: the same game's skill at least this many points above each control.
GATE_POINTS = 20.0


def _segments(mask: list[int]) -> list[int]:
    """Start offsets of the policy segments (runs of 1) in a completion mask."""
    return [i for i, m in enumerate(mask) if m and (i == 0 or not mask[i - 1])]


def probe(model, chat, env, tasks, env_name: str, max_turns: int, max_total_tokens: int, budget: int,
          play_hinted: Callable | None = None) -> dict:
    """Per condition: turns, expert action ranked first (``accuracy``), mean log-prob of the expert's action, and
    ``first_skill_turn``: the same at the first turn where the skill-following expert departs from the searching
    one (where the skill's content decides the action); ``gaps`` over all turns and ``deciding_gaps`` at that
    turn (:func:`gaps`); ``per_game`` (hits per turn, per condition) feeds both.
    ``play_hinted(env, task, donor_actions)``: the expert the same-game skill describes (default: the
    environment's, with the donor's actions as its hint)."""
    import torch

    from skillduet_plugin.rollout.choice import action_response, candidate_logprobs
    from skillduet_plugin.runs.evaluate import neutral_text
    from skillduet_plugin.warmstart.episodes import analyzer_skill, layout_episode, play_expert
    from skillduet_plugin.warmstart.reading import DONOR_TURNS
    from skillduet_plugin.skills.inject import LOCAL_HEADER, insert_sections, skill_section

    if play_hinted is None:
        def play_hinted(env_, task_, hint):
            return play_expert(env_, task_, max_turns=max_turns, seed=0, hint=hint)

    donors = {t: play_expert(env, t, max_turns=DONOR_TURNS, seed=1) for t in tasks}
    skills = {t: analyzer_skill(d, env_name) for t, d in donors.items() if d.won}
    stats = {c: {"hits": 0, "turns": 0, "logp": [], "first_hits": 0, "first_turns": 0} for c in CONDITIONS}
    per_game: dict[str, dict[str, list[int]]] = {}
    deciding: dict[str, int | None] = {}
    for t in tasks:
        if t not in skills:
            continue
        rec = play_hinted(env, t, donors[t].actions)
        plain = play_expert(env, t, max_turns=max_turns, seed=0).actions
        first = deciding[t] = next((k for k, (a, b) in enumerate(zip(rec.actions, plain)) if a != b), None)
        other = [o for o in skills if o != t and donors[o].scope == rec.scope]
        texts = {"none": None, "same_game": skills[t], "other_game": skills[other[0]] if other else None,
                 "neutral": neutral_text(len(chat.encode(skills[t])), chat.tokenizer)}
        per_game[t] = {}
        for cond, text in texts.items():
            if cond != "none" and text is None:
                continue
            insert = None
            if text is not None:
                section = skill_section(LOCAL_HEADER, text, budget, chat.tokenizer)
                insert = (lambda m, t_, s, sec=section: insert_sections(m, [sec], task=t_, position="after_task"))
            ep = layout_episode(rec, env_name, chat, max_total_tokens=max_total_tokens, skill_sections=insert)
            starts = _segments(ep.tokens.completion_mask)
            hits = per_game[t][cond] = []
            for k, action in enumerate(ep.actions):
                context = ep.tokens.prompt_ids + ep.tokens.completion_ids[:starts[k]]
                options = rec.admissible[k] if action in rec.admissible[k] else rec.admissible[k] + [action]
                cands = [chat.encode(action_response(a)) + [chat.eos_token_id] for a in options]
                with torch.no_grad():
                    scores = torch.tensor(candidate_logprobs(model, context, cands))
                logp = scores.log_softmax(-1)[options.index(action)].item()
                hit = int(int(scores.argmax()) == options.index(action))
                hits.append(hit)
                s = stats[cond]
                s["turns"] += 1
                s["hits"] += hit
                s["logp"].append(logp)
                if k == first:
                    s["first_turns"] += 1
                    s["first_hits"] += hit
    result = {c: {"turns": s["turns"], "accuracy": round(s["hits"] / max(1, s["turns"]), 4),
                  "mean_logp_expert": round(statistics.fmean(s["logp"]), 4) if s["logp"] else None,
                  "first_skill_turn": {"turns": s["first_turns"],
                                       "accuracy": round(s["first_hits"] / max(1, s["first_turns"]), 4)}}
              for c, s in stats.items()}
    return {**result, "gaps": gaps(per_game), "deciding_gaps": gaps(deciding_turns(per_game, deciding)),
            "per_game": per_game}


def gaps(per_game: dict[str, dict[str, list[int]]], *, gate_points: float = GATE_POINTS,
         n_boot: int = 10000) -> dict:
    """Same-game skill minus each control, in points of "expert action ranked first", with a paired 95%
    bootstrap interval over the games (``core.stats.bootstrap_interval``: each game's accuracy over the turns
    both conditions scored, so a game's difficulty cancels), and the ``ceiling``: the largest gap a perfect
    reader could show on those turns (100 minus the control's accuracy). ``gate``: whether every control's gap
    is at least ``gate_points`` (``gate_low``: whether every interval's low end is)."""
    from skillduet_plugin.core.stats import bootstrap_interval

    out: dict = {}
    for control in CONDITIONS:
        if control == "same_game":
            continue
        a, b = [], []
        for hits in per_game.values():
            if "same_game" not in hits or control not in hits:
                continue
            n = min(len(hits["same_game"]), len(hits[control]))
            if n:
                a.append(statistics.fmean(hits["same_game"][:n]))
                b.append(statistics.fmean(hits[control][:n]))
        if not a:
            out[control] = None
            continue
        iv = bootstrap_interval(a, b, n_boot=n_boot)
        out[control] = {"games": len(a), "points": round(100 * iv.estimate, 1),
                        "ci": [round(100 * iv.low, 1), round(100 * iv.high, 1)],
                        "ceiling": round(100 * (1 - statistics.fmean(b)), 1)}
    present = [g for g in out.values() if g is not None]
    out["gate"] = bool(present) and len(present) == len(CONDITIONS) - 1 and all(
        g["points"] >= gate_points for g in present)
    out["gate_low"] = bool(out["gate"]) and all(g["ci"][0] >= gate_points for g in present)
    return out


def deciding_turns(per_game: dict[str, dict[str, list[int]]], first: dict[str, int | None]) -> dict:
    """Per game with a deciding turn (``first[game]``: the first turn where the skill-following expert departs
    from the plain search), each condition's hit at that turn: what :func:`gaps` reads for the deciding turn."""
    return {g: {c: hits[first[g]:first[g] + 1] for c, hits in conds.items() if first[g] < len(hits)}
            for g, conds in per_game.items() if first.get(g) is not None}


class LocalSkillCondition:
    """What ``rollout.collector.run_episodes`` calls for skills (a lifecycle's ``student_messages`` and
    ``global_for``): each episode's first prompt carries the Local skill of its own game, as the OPD teacher's
    ``## Hindsight skill`` section (scope = the task id)."""

    def __init__(self, skills: dict[str, str], tokenizer, budget: int) -> None:
        from types import SimpleNamespace

        self.skills, self.tokenizer, self.budget = skills, tokenizer, budget
        self.mode = "local"
        self.config = SimpleNamespace(scope="task", use_global=True)

    def global_for(self, scope: str):
        from skillduet_plugin.skills.types import GlobalSkills

        return GlobalSkills(scope=scope, version=None, text="")

    def student_messages(self, prompt_messages, *, task: str, scope: str, **_):
        from skillduet_plugin.skills.inject import LOCAL_HEADER, insert_sections, skill_section

        text = self.skills.get(scope, "")
        if not text:
            return [dict(m) for m in prompt_messages]
        section = skill_section(LOCAL_HEADER, text, self.budget, self.tokenizer)
        return insert_sections(prompt_messages, [section], task=task, position="after_task")


def success(model, tokenizer, config, env_kwargs: dict, tasks: list[str]) -> dict:
    """Greedy success (choose mode) on ``tasks`` with no skill and with each game's own Local skill (from its
    seed-1 expert episode, as the probe's): how much better the OPD teacher is than the student."""
    from skillduet_plugin.envs import make
    from skillduet_plugin.envs.pool import EnvPool
    from skillduet_plugin.runs.evaluate import GlobalCondition, play_panel
    from skillduet_plugin.warmstart.episodes import LOCAL_SKILL_TOKENS, analyzer_skill, play_expert
    from skillduet_plugin.warmstart.reading import DONOR_TURNS

    env = make(config.env, **env_kwargs)
    try:
        donors = {t: play_expert(env, t, max_turns=DONOR_TURNS, seed=1) for t in tasks}
    finally:
        env.close()
    skills = {t: analyzer_skill(d, config.env) for t, d in donors.items() if d.won}
    pool = EnvPool(config.env, num_workers=0, env_kwargs=env_kwargs)
    out = {"games": len(tasks), "with_skill": len(skills)}
    try:
        for name, cond in (("none", GlobalCondition("none", None)),
                           ("own_local", LocalSkillCondition(skills, tokenizer, LOCAL_SKILL_TOKENS))):
            eps = play_panel(model, tokenizer, tasks, env_name=config.env, pool=pool, condition=cond,
                             max_turns=config.max_turns, max_new_tokens=config.max_new_tokens_per_turn,
                             max_total_tokens=config.max_total_tokens, action_selection="choose")
            out[name] = round(100 * statistics.fmean(float(bool(ep.won)) for ep in eps), 1)
    finally:
        pool.close()
    return out


def panel_env_kwargs(config, split: str, per_type: int) -> dict:
    """The env keywords of the probe's panel: ``split`` of the run's data, or with ``per_type`` > 0 a generated
    ``split`` of that many games per task type (seed 0: its first games are the default split's)."""
    from skillduet_plugin.envs.alfworld.generator import ensure_default_data
    from skillduet_plugin.runs.environment import env_kwargs

    kw = env_kwargs(config, split)
    if per_type:
        kw["data_dir"] = str(ensure_default_data(split, per_type))
    return kw


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=None, help="a run config file (default: the demo's settings)")
    parser.add_argument("--set", action="append", default=[], help="run-config overrides (key=value), e.g. "
                        "warm_start.design=reading; the clone is the one `skillduet train` with them starts from")
    parser.add_argument("--model", default=None, help="the run's model (default: the config's, tiny)")
    parser.add_argument("--panel", default="valid_unseen")
    parser.add_argument("--panel-per-type", type=int, default=0, help="a generated panel of this many games per "
                        "task type (0: the run's split as it is)")
    parser.add_argument("--games", type=int, default=0, help="the panel's first N games (0: all)")
    parser.add_argument("--success", action="store_true", help="also greedy success with no skill and with each "
                        "game's own Local skill, on the RL games and on the panel")
    parser.add_argument("--seed", type=int, default=None, help="the run's seed (default: the config's, 0)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from skillduet_plugin.core.conversation import ChatTokenizer
    from skillduet_plugin.envs import make
    from skillduet_plugin.runs.config import load_run_config
    from skillduet_plugin.runs.environment import env_kwargs
    from skillduet_plugin.runs.rundir import resolve_model
    from skillduet_plugin.runs.trl_runner import interleave_by_type, set_threads, train_tasks
    from skillduet_plugin.warmstart.episodes import LOCAL_SKILL_TOKENS

    overrides = [*([f"seed={args.seed}"] if args.seed is not None else []),
                 *([f"model={args.model}"] if args.model else []), *args.set]
    config = load_run_config(args.config, overrides)
    set_threads(config)
    t0 = time.time()
    if config.warm_start_enabled:
        folder, info = _common.warm_started(config)
    else:  # a model folder probed as it is (e.g. a study's shared model: --model DIR --set warm_start.enabled=false)
        folder, info = resolve_model(config.model, seed=config.seed, env=config.env), {}
    clone_s = time.time() - t0
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    chat = ChatTokenizer(AutoTokenizer.from_pretrained(folder))
    max_turns = config.warm_start.max_turns or config.max_turns
    panel_kw = panel_env_kwargs(config, args.panel, args.panel_per_type)
    panel_env = make(config.env, **panel_kw)
    tasks = interleave_by_type(panel_env, list(panel_env.tasks), args.games)
    result = probe(model, chat, panel_env, tasks, config.env, max_turns, config.max_total_tokens, LOCAL_SKILL_TOKENS)
    panel_env.close()
    result.pop("per_game")
    kept = ("loss_first", "loss_last", "episodes", "expert_won", "seconds", "build_seconds", "cached")
    out = {"config": [args.config, *overrides], "model": config.model, "panel": args.panel,
           "panel_per_type": args.panel_per_type, "games": len(tasks), "warm_start": {k: info.get(k) for k in kept},
           "clone_wall_s": round(clone_s, 1), "result": result}
    if args.success:
        out["success"] = {
            "rl_games": success(model, chat.tokenizer, config, env_kwargs(config, config.train_split),
                                train_tasks(config)),
            "panel": success(model, chat.tokenizer, config, panel_kw, tasks)}
    _common.probe_output(out, args.json, t0)


if __name__ == "__main__":
    main()
