"""Probe: does a warm-started model read a Local skill? On each game of a panel, another expert episode of the same
game (seed 1) gives the analyzer's Local skill (``warmstart.episodes.analyzer_skill``: it says where the target was
taken); the expert that acts on it (``hint``) plays the episode that is teacher-forced. Each turn scores every
admissible action (choose mode) with the first prompt holding no skill section, that Local skill under
``## Hindsight skill`` (same game), the Local skill of another game of the task type (same form, wrong
content) or length-matched neutral text. A model that reads skills puts more probability on the hinted expert's
action with the same-game skill than without or with the others. ``gaps`` gives the same-game skill minus each
control with a paired 95% bootstrap interval over the games, and whether all three clear the gate (20 points).

    python bench/skill_reading.py                       # the demo's warm start (cached), valid_unseen games
    python bench/skill_reading.py --panel train         # the games it was cloned on
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
    one (where the skill's content decides the action). ``per_game`` (hits per turn, per condition) feeds
    :func:`gaps`. ``play_hinted(env, task, donor_actions)``: the expert the same-game skill describes (default: the
    environment's, with the donor's actions as its hint)."""
    import torch

    from skillduet_plugin.rollout.choice import action_response, candidate_logprobs
    from skillduet_plugin.runs.evaluate import neutral_text
    from skillduet_plugin.warmstart.episodes import analyzer_skill, layout_episode, play_expert
    from skillduet_plugin.skills.inject import LOCAL_HEADER, insert_sections, skill_section

    if play_hinted is None:
        def play_hinted(env_, task_, hint):
            return play_expert(env_, task_, max_turns=max_turns, seed=0, hint=hint)

    donors = {t: play_expert(env, t, max_turns=max_turns, seed=1) for t in tasks}
    skills = {t: analyzer_skill(d, env_name) for t, d in donors.items() if d.won}
    stats = {c: {"hits": 0, "turns": 0, "logp": [], "first_hits": 0, "first_turns": 0} for c in CONDITIONS}
    per_game: dict[str, dict[str, list[int]]] = {}
    for t in tasks:
        if t not in skills:
            continue
        rec = play_hinted(env, t, donors[t].actions)
        plain = play_expert(env, t, max_turns=max_turns, seed=0).actions
        first = next((k for k, (a, b) in enumerate(zip(rec.actions, plain)) if a != b), None)
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
    return {**result, "gaps": gaps(per_game), "per_game": per_game}


def gaps(per_game: dict[str, dict[str, list[int]]], *, gate_points: float = GATE_POINTS,
         n_boot: int = 10000) -> dict:
    """Same-game skill minus each control, in points of "expert action ranked first", with a paired 95%
    bootstrap interval over the games (``core.stats.bootstrap_interval``: each game's accuracy over the turns
    both conditions scored, so a game's difficulty cancels). ``gate``: whether every control's gap is at least
    ``gate_points`` (``gate_low``: whether every interval's low end is)."""
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
                        "ci": [round(100 * iv.low, 1), round(100 * iv.high, 1)]}
    present = [g for g in out.values() if g is not None]
    out["gate"] = bool(present) and len(present) == len(CONDITIONS) - 1 and all(
        g["points"] >= gate_points for g in present)
    out["gate_low"] = bool(out["gate"]) and all(g["ci"][0] >= gate_points for g in present)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=700, help="warm-start cloning steps (700: the demo's)")
    parser.add_argument("--skill-fraction", type=float, default=0.5)
    parser.add_argument("--panel", default="valid_unseen")
    parser.add_argument("--games", type=int, default=48, help="the panel's first N games")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from skillduet_plugin.core.conversation import ChatTokenizer
    from skillduet_plugin.runs.config import load_run_config
    from skillduet_plugin.runs.environment import make_env
    from skillduet_plugin.runs.trl_runner import set_threads
    from skillduet_plugin.warmstart.episodes import LOCAL_SKILL_TOKENS

    config = load_run_config(None, [f"warm_start.steps={args.steps}", f"seed={args.seed}",
                                    f"warm_start.skill_fraction={args.skill_fraction}"])
    set_threads(config)
    t0 = time.time()
    folder, info = _common.warm_started(config)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    chat = ChatTokenizer(AutoTokenizer.from_pretrained(folder))
    panel_env = make_env(config, args.panel)
    tasks = list(panel_env.tasks)[:args.games]
    result = probe(model, chat, panel_env, tasks, config.env, config.warm_start.max_turns or config.max_turns,
                   config.max_total_tokens, LOCAL_SKILL_TOKENS)
    result.pop("per_game")
    _common.probe_output({"steps": args.steps, "skill_fraction": args.skill_fraction, "panel": args.panel,
                          "games": len(tasks), "warm_start_loss": info.get("loss_last"), "result": result},
                         args.json, t0)


if __name__ == "__main__":
    main()
