"""Benchmark: the warm start's cloning step, three ways, side by side on the CPU demo's own data.

The demo's 80 expert episodes (40 generated ALFWorld games x 2, laid out exactly as the warm start does) are
cloned for ``--steps`` optimizer steps of 4 episodes from the same initial weights, three ways:

- ``padded``: one forward and backward of the right-padded batch (the warm start before per-episode gradients);
- ``episodes x1``: ``warmstart.episodes.clone`` with ``workers=1`` (one unpadded episode at a time, in this process);
- ``episodes x2``: the same with ``workers=2`` (two spawned single-threaded worker processes).

Reports seconds per step (wall, steps 2.. so the workers' start-up is left out, but reported apart) and whether
the two per-episode ways end with identical weights (they must). One torch thread everywhere (the demo's
setting on 2 cores).

    python bench/cloning.py --steps 40
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def demo_episodes(cache: Path) -> tuple[Path, list]:
    """The tiny model folder and the demo's cloning episodes (games generated into ``cache``)."""
    os.environ["SKILLDUET_CACHE"] = str(cache)
    from transformers import AutoTokenizer

    from skillduet_plugin.core.conversation import ChatTokenizer
    from skillduet_plugin.runs.config import RunConfig
    from skillduet_plugin.runs.environment import make_env
    from skillduet_plugin.runs.rundir import resolve_model
    from skillduet_plugin.warmstart.episodes import build_cloning_data, plan_skill_sections, play_expert

    config = RunConfig()
    ws = config.warm_start
    model_dir = Path(resolve_model(config.model, seed=config.seed))
    env = make_env(config, config.train_split, ws.games)
    try:
        records = [play_expert(env, t, max_turns=ws.max_turns, kind=ws.expert, seed=k)
                   for t in list(env.tasks)[:ws.games] for k in range(ws.episodes_per_game)]
        plans = plan_skill_sections(records, "alfworld", skill_fraction=ws.skill_fraction,
                                    skill_token_budget=ws.skill_token_budget, seed=config.seed)
        records = [play_expert(env, rec.task_id, max_turns=ws.max_turns, kind=ws.expert, seed=rec.seed,
                               hint=records[plan.donor].actions) if plan is not None and plan.kind == "local"
                   else rec for rec, plan in zip(records, plans)]  # as the warm start plays them
    finally:
        env.close()
    chat = ChatTokenizer(AutoTokenizer.from_pretrained(model_dir))
    episodes = build_cloning_data(records, "alfworld", chat, max_total_tokens=config.max_total_tokens, plans=plans,
                                  skill_token_budget=ws.skill_token_budget,
                                  skill_position=config.method_config().skill_position)
    return model_dir, episodes


def padded(model, episodes, steps: int) -> list[float]:
    import torch

    from skillduet_plugin.warmstart.loss import cloning_loss

    gen = torch.Generator().manual_seed(0)
    optim = torch.optim.AdamW(model.parameters(), lr=6e-3, weight_decay=0.0)
    times = []
    for _ in range(steps):
        idx = torch.randperm(len(episodes), generator=gen)[:4].tolist()
        t0 = time.perf_counter()
        cloning_loss(model, [episodes[i] for i in idx]).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        optim.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--cache", default=None, help="SKILLDUET_CACHE for the games and model (default: a temp dir)")
    args = ap.parse_args()
    import torch
    from transformers import AutoModelForCausalLM

    from skillduet_plugin.warmstart.episodes import clone

    torch.set_num_threads(1)
    cache = Path(args.cache or tempfile.mkdtemp(prefix="bench-cloning-"))
    model_dir, episodes = demo_episodes(cache)
    lengths = sorted(len(ep.tokens) for ep in episodes)
    fresh = lambda: AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)  # noqa: E731
    out = {"steps": args.steps, "episodes": len(episodes), "tokens_median": lengths[len(lengths) // 2],
           "tokens_max": lengths[-1], "load_before": os.getloadavg()[0]}
    times = padded(fresh(), episodes, args.steps)
    out["padded_s_per_step"] = sum(times[1:]) / len(times[1:])
    weights = {}
    for workers in (1, 2):
        model, stamps = fresh(), []
        t0 = time.perf_counter()
        clone(model, episodes, steps=args.steps, batch_size=4, learning_rate=6e-3, workers=workers,
              model_dir=model_dir, on_step=lambda k, loss: stamps.append(time.perf_counter()))
        out[f"episodes_x{workers}_s_per_step"] = (stamps[-1] - stamps[0]) / (len(stamps) - 1)
        out[f"episodes_x{workers}_startup_s"] = stamps[0] - t0 - out[f"episodes_x{workers}_s_per_step"]
        weights[workers] = model.state_dict()
    out["identical_weights_x1_x2"] = all(torch.equal(v, weights[2][k]) for k, v in weights[1].items())
    out["load_after"] = os.getloadavg()[0]
    out["speedup_x2_vs_padded"] = out["padded_s_per_step"] / out["episodes_x2_s_per_step"]
    out["speedup_x1_vs_padded"] = out["padded_s_per_step"] / out["episodes_x1_s_per_step"]
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
