"""Where a warm-started (cloned) model loses games, measured on its own greedy episodes, beside the ceiling the
expert it was cloned from sets at the run's turn limit.

For a run directory (its ``config.yaml``; the model is ``--model`` or the run's ``final_model``):

- ``expert``: the environment's searching expert (two search orders per game) on the run's RL games and its
  evaluation panel, with 50 turns, and the share it wins within 10, 12, 20, 30 and 50 turns: what the turn limit
  leaves winnable;
- ``model``: the model's greedy episodes without any skill section (the run's action selection and token
  limits) on the panel, at each ``--max-turns``, broken down: games won, games whose target object it ever saw,
  games where it took the target, the share of turns with the target in view on which it took it, and the share
  of its ``go to`` actions that revisit a receptacle it had been to;
- ``sizes`` (no run needed): one forward and backward of a 4 x 2,048-token batch for each built-in model size,
  one torch thread, and its ratio to ``tiny``: what a larger clone costs per step.

    python bench/clone_diagnosis.py --run RUN_DIR [--model MODEL_DIR] --panel-tasks 40 --max-turns 10,30 \\
        --json out.json
    python bench/clone_diagnosis.py --sizes --json sizes.json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import _common  # noqa: E402,F401  (offline environment variables, the CPU kernels)

TURN_LIMITS = (10, 12, 20, 30, 50)
# the target object of an ALFWorld task sentence (the six task types' phrasings)
TARGET_PATTERNS = (r"put (?:a|an|some) (?:clean |hot |cool )?(\w+) (?:in|on)",
                   r"(?:clean|heat|cool) some (\w+) and put", r"look at (\w+) under", r"examine the (\w+) with",
                   r"put two (\w+) in", r"find two (\w+) and put")


def target_of(task: str) -> str | None:
    """The object an ALFWorld task sentence asks for (``put a clean mug in cabinet.`` -> ``mug``), or None."""
    for pattern in TARGET_PATTERNS:
        match = re.search(pattern, task)
        if match:
            return match.group(1)
    return None


def episode_behaviour(task: str, observations: Sequence[str], actions: Sequence[str], won: bool) -> dict[str, Any]:
    """One episode's breakdown: ``observations[i]`` is what the agent saw before ``actions[i]``. The target is in
    view on a turn when the observation lists ``<target> <n>`` and the agent does not hold one yet."""
    target = target_of(task)
    seen_turns = taken_in_view = gotos = revisits = 0
    holding = ever_seen = False
    visited: set[str] = set()
    for obs, action in zip(observations, actions):
        in_view = target is not None and not holding and re.search(rf"\b{re.escape(target)} \d", obs) is not None
        took = target is not None and action.startswith(f"take {target} ")
        if in_view:
            ever_seen, seen_turns, taken_in_view = True, seen_turns + 1, taken_in_view + took
        holding = holding or took
        if action.startswith("go to "):
            gotos, revisits = gotos + 1, revisits + (action in visited)
            visited.add(action)
    return {"target": target, "won": bool(won), "turns": len(actions), "ever_seen": ever_seen, "took": holding,
            "seen_turns": seen_turns, "taken_in_view": taken_in_view, "gotos": gotos, "revisits": revisits}


def summarise(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Shares over episodes (won, target ever seen, target taken) and over turns (taken when in view; revisits
    among ``go to`` actions); None where the denominator is 0."""

    def share(num: float, den: float) -> float | None:
        return round(num / den, 4) if den else None

    n = len(rows)
    return {"episodes": n, "won": share(sum(r["won"] for r in rows), n),
            "target_ever_seen": share(sum(r["ever_seen"] for r in rows), n),
            "took_target": share(sum(r["took"] for r in rows), n),
            "take_rate_when_in_view": share(sum(r["taken_in_view"] for r in rows), sum(r["seen_turns"] for r in rows)),
            "revisit_share_of_gotos": share(sum(r["revisits"] for r in rows), sum(r["gotos"] for r in rows)),
            "targets_parsed": sum(r["target"] is not None for r in rows)}


def _config(run: Path):
    from skillduet_plugin.runs.config import saved_run_config

    return saved_run_config(run / "config.yaml")


def expert_ceiling(config: Any, tasks: Sequence[str], split: str, seeds: Sequence[int] = (1, 2)) -> dict[str, Any]:
    from skillduet_plugin.runs.environment import make_env
    from skillduet_plugin.warmstart.episodes import play_expert

    env = make_env(config, split)
    rows, t0 = [], time.time()
    try:
        for task in tasks:
            for seed in seeds:
                rec = play_expert(env, task, max_turns=max(TURN_LIMITS), kind="search", seed=seed)
                rows.append({"task": task, "seed": seed, "won": rec.won, "turns": len(rec.actions)})
    finally:
        env.close()
    within = {str(k): round(sum(r["won"] and r["turns"] <= k for r in rows) / len(rows), 4) for k in TURN_LIMITS}
    return {"split": split, "games": len(tasks), "episodes": len(rows), "won_within": within,
            "seconds": round(time.time() - t0, 1), "rows": rows}


def model_behaviour(config: Any, model_dir: Path, tasks: Sequence[str], max_turns: int) -> dict[str, Any]:
    from skillduet_plugin.runs.environment import make_pool
    from skillduet_plugin.runs.evaluate import GlobalCondition, episode_limits, play_panel
    from skillduet_plugin.runs.trl_runner import load_model

    model, tokenizer = load_model(model_dir, config)
    limits = {**episode_limits(config), "max_turns": max_turns}
    pool = make_pool(config, config.panel)
    t0 = time.time()
    try:
        episodes = play_panel(model, tokenizer, list(tasks), pool=pool, condition=GlobalCondition("none"), **limits)
    finally:
        pool.close()
    rows = [{"task_id": e.task_id, "task": e.task, **episode_behaviour(e.task, e.observations, e.actions, e.won),
             "actions": list(e.actions)} for e in episodes]
    return {"max_turns": max_turns, **summarise(rows), "seconds": round(time.time() - t0, 1), "rows": rows}


def size_costs(sizes: Sequence[str] = ("tiny", "tiny64", "small", "base"), tokens: int = 2048, batch: int = 4,
               repeats: int = 3) -> dict[str, Any]:
    import torch

    from skillduet_plugin.warmstart.tiny_model import build_model, build_tokenizer

    torch.set_num_threads(1)
    tokenizer = build_tokenizer()
    out: dict[str, Any] = {}
    for size in sizes:
        model = build_model(tokenizer, size=size)
        x = torch.randint(10, len(tokenizer), (batch, tokens))
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            model(input_ids=x, labels=x).loss.backward()
            times.append(time.perf_counter() - t0)
            model.zero_grad()
        out[size] = {"params": sum(p.numel() for p in model.parameters()), "seconds": round(min(times), 3)}
    for size in out:
        tiny = out.get("tiny", {}).get("seconds")
        out[size]["ratio_to_tiny"] = round(out[size]["seconds"] / tiny, 2) if tiny else None
    return {"batch": batch, "tokens": tokens, "threads": 1, "sizes": out}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", default=None, help="a run directory (config.yaml; final_model unless --model)")
    parser.add_argument("--model", default=None, help="the model folder to play (default: RUN/final_model)")
    parser.add_argument("--panel-tasks", type=int, default=40, help="panel games (round-robin over task types)")
    parser.add_argument("--max-turns", default="",
                        help="comma-separated turn limits of the model's episodes (default: the run's)")
    parser.add_argument("--no-expert", action="store_true", help="skip the expert ceiling")
    parser.add_argument("--sizes", action="store_true", help="time one cloning-sized step per model size")
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args(argv)
    if not args.run and not args.sizes:
        parser.error("give --run RUN_DIR and/or --sizes")
    result: dict[str, Any] = {"machine": _common.machine_conditions()}
    if args.run:
        from skillduet_plugin.runs.trl_runner import panel, train_tasks

        run = Path(args.run)
        config = _config(run)
        model_dir = Path(args.model) if args.model else run / "final_model"
        panel_ids = panel(config, limit=args.panel_tasks)
        result["run"] = {"dir": str(run), "model": str(model_dir.resolve()), "panel": config.panel,
                         "data_dir": config.data_dir, "max_turns": config.max_turns}
        if not args.no_expert:
            result["expert"] = {"rl_games": expert_ceiling(config, train_tasks(config), config.train_split),
                                "panel": expert_ceiling(config, panel_ids, config.panel)}
            for part, data in result["expert"].items():
                print(f"expert on the {part} ({data['games']} games x 2): won within " +
                      ", ".join(f"{k} turns {v:.0%}" for k, v in data["won_within"].items()), flush=True)
        limits = [int(x) for x in args.max_turns.split(",") if x] or [config.max_turns]
        result["model"] = [model_behaviour(config, model_dir, panel_ids, k) for k in limits]
        for m in result["model"]:
            print(f"model, {m['max_turns']} turns, {m['episodes']} panel games: won {m['won']:.1%}, target seen "
                  f"{m['target_ever_seen']:.1%}, taken {m['took_target']:.1%}, taken when in view "
                  f"{m['take_rate_when_in_view']:.1%} of turns, revisits {m['revisit_share_of_gotos']:.1%} of go-tos",
                  flush=True)
    if args.sizes:
        result["sizes"] = size_costs()
        for size, data in result["sizes"]["sizes"].items():
            print(f"{size}: {data['params']} parameters, {data['seconds']} s per step ({data['ratio_to_tiny']}x tiny)")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
