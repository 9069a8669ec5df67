"""Probe: which WebShop decisions does a model get right? The searching shopper plays each goal of a panel; at each
of its turns the model scores every admissible action in the same context (choose mode, exactly the prompt the
RL loop builds) and its argmax is compared with the shopper's action. The shopper's action is then played
whatever the model chose (teacher forcing), so one wrong choice does not derail the rest of the episode. Counts
are per decision kind: the search query, the result row, the option the instruction names, ``buy now``, the rest.
Then the model plays the same goals greedily on its own. docs/study.md ("Why the WebShop clone wins no test goal")
is this table for the clones that led to the demo's.

    python bench/webshop_decisions.py                        # the WebShop demo's warm start (cached), 40 test goals
    python bench/webshop_decisions.py --model RUN/final_model --goals 16
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import _common  # noqa: E402  (offline environment variables; the shared probe helpers)

KINDS = ("search", "row", "results:other", "option", "buy", "item:other", "other")


def decision_kind(admissible: list[str], action: str) -> str:
    """What the shopper's ``action`` decides on a page with these admissible actions."""
    from skillduet_plugin.envs.webshop.expert import page_kind

    page = page_kind(admissible)
    clicked = action[len("click["):-1] if action.startswith("click[") and action.endswith("]") else None
    if page == "index":
        return "search"
    if page == "results":
        return "results:other" if clicked in ("next >", "< prev", "back to search") else "row"
    if page == "item":
        if clicked == "buy now":
            return "buy"
        if clicked in ("< prev", "back to search", "description", "features", "reviews", "attributes"):
            return "item:other"
        return "option"
    return "other"


def probe(model, chat, env, tasks: list[str], env_name: str, max_turns: int, max_total_tokens: int,
          max_new_tokens: int) -> dict:
    import torch

    from skillduet_plugin.envs.webshop.expert import make_expert
    from skillduet_plugin.rollout.choice import action_response, candidate_logprobs
    from skillduet_plugin.rollout.engine import EpisodeEngine, Generation

    engine = EpisodeEngine(env_name, chat, max_turns=max_turns, max_new_tokens=max_new_tokens,
                           max_total_tokens=max_total_tokens, scope="task_type", action_selection="choose")

    def response_ids(action: str) -> tuple[int, ...]:
        return tuple(chat.encode(action_response(action)) + [chat.eos_token_id])

    def argmax(request) -> tuple[int, ...]:
        with torch.no_grad():
            lp = candidate_logprobs(model, request.context_ids, request.candidates)
        return tuple(request.candidates[max(range(len(lp)), key=lp.__getitem__)])

    agreed: Counter = Counter()
    decisions: Counter = Counter()
    instead: Counter = Counter()
    for task in tasks:
        obs, info = env.reset(task)
        expert = make_expert(env, task, "search", seed=0)
        state = engine.start(task, obs, info)
        for turn in range(max_turns):
            request = state.next_request()
            if request is None:
                break
            admissible = list(dict.fromkeys(state.admissible))
            by_ids = {response_ids(a): a for a in admissible}
            action = expert(obs, info, turn)
            kind = decision_kind(admissible, action)
            chosen = by_ids.get(argmax(request), "?")
            decisions[kind] += 1
            agreed[kind] += chosen == action
            if chosen != action:
                instead[(kind, decision_kind(admissible, chosen) if chosen != "?" else "?")] += 1
            state.on_generation(Generation(list(response_ids(action))))
            obs, reward, done, info = env.step(action)
            state.on_step(obs, reward, done, info)
            if done:
                break
    wins, score = 0, 0.0
    for task in tasks:
        obs, info = env.reset(task)
        state = engine.start(task, obs, info)
        while (request := state.next_request()) is not None:
            action = state.on_generation(Generation(list(argmax(request))))
            obs, reward, done, info = env.step(action)
            state.on_step(obs, reward, done, info)
        wins += bool(info.get("won"))
        score += float(info.get("score") or 0.0)
    return {"decisions": {k: f"{agreed[k]}/{decisions[k]}" for k in KINDS if decisions[k]},
            "chosen_instead": {f"{k} -> {v}": n for (k, v), n in instead.most_common(10)},
            "greedy_play": {"won": wins, "goals": len(tasks), "mean_score": round(score / max(len(tasks), 1), 3)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="a model folder (default: the WebShop demo's warm start, "
                                                      "built and cached on first use)")
    parser.add_argument("--panel", default="test")
    parser.add_argument("--goals", type=int, default=40, help="the panel's first N goals")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from skillduet_plugin.core.conversation import ChatTokenizer
    from skillduet_plugin.runs.config import load_run_config
    from skillduet_plugin.runs.environment import make_env
    from skillduet_plugin.runs.trl_runner import set_threads

    config = load_run_config(None, ["env=webshop", f"seed={args.seed}"])
    set_threads(config)
    t0 = time.time()
    folder = args.model or _common.warm_started(config)[0]
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    chat = ChatTokenizer(AutoTokenizer.from_pretrained(folder))
    env = make_env(config, args.panel)
    tasks = list(env.tasks)[:args.goals]
    result = probe(model, chat, env, tasks, config.env, config.max_turns, config.max_total_tokens,
                   config.max_new_tokens_per_turn)
    _common.probe_output({"model": str(folder), "panel": args.panel, "goals": len(tasks), "result": result},
                         args.json, t0)


if __name__ == "__main__":
    main()
