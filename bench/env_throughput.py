"""Benchmark: environment steps per second through ``EnvPool`` with 0 (in-process), 1 and 2 worker processes,
and the cost of a reset, for ALFWorld (the real TextWorld engine) and WebShop (synthetic catalogue).

Each round resets a batch of episodes and steps every live one with a random admissible action (seeded per
round, so every configuration plays the same episodes). Configurations are interleaved round by round after a
warm-up round (which pays the one-time game parsing; reported separately as the cold reset). Headline:
``env_pool_speedup_2w`` = ALFWorld steps/s with 2 workers / with 1 worker.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import _common  # noqa: E402


def play_round(pool, task_ids: list[str], steps: int, seed: int) -> dict[str, float]:
    """Reset ``task_ids`` then step all live episodes ``steps`` times; seconds and step counts."""
    rng = random.Random(seed)
    start = time.perf_counter()
    results = pool.reset(task_ids)
    reset_s = time.perf_counter() - start
    errors = sum(r.error is not None for r in results)
    live = {i: r.info.get("admissible_actions") or ["look"] for i, r in enumerate(results) if not r.done}
    tasks = {i: str(r.info.get("task", "")) for i, r in enumerate(results)}

    def choose(i: int) -> str:
        action = rng.choice(sorted(live[i]))
        # WebShop's search page offers a template, not a query: search the instruction's words like a policy
        return f"search[{' '.join(tasks[i].split()[:8])}]" if "<your query>" in action else action
    n_steps = 0
    start = time.perf_counter()
    for _ in range(steps):
        if not live:
            break
        ids = sorted(live)
        outs = pool.step(ids, [choose(i) for i in ids])
        n_steps += len(ids)
        for i, r in zip(ids, outs):
            errors += r.error is not None
            if r.done:
                live.pop(i)
            else:
                live[i] = r.info.get("admissible_actions") or ["look"]
    step_s = time.perf_counter() - start
    return {"reset_s": reset_s, "step_s": step_s, "steps": n_steps, "episodes": len(task_ids), "errors": errors}


def bench_env(env_name: str, env_kwargs: dict, task_ids: list[str], workers: list[int], steps: int,
              repeats: int, warmup: int) -> dict:
    from skillduet_plugin.envs.pool import EnvPool

    pools = {}
    spawn_s = {}
    for w in workers:
        start = time.perf_counter()
        pools[w] = EnvPool(env_name, num_workers=w, env_kwargs=env_kwargs)
        spawn_s[w] = time.perf_counter() - start
    rounds: dict[int, list[dict]] = {w: [] for w in workers}
    cold: dict[int, dict] = {}
    try:
        for rnd in range(warmup + repeats):
            for w in workers:  # interleaved: 0 1 2 0 1 2 ...
                res = play_round(pools[w], task_ids, steps, seed=rnd)
                if rnd == 0:
                    cold[w] = res
                if rnd >= warmup:
                    rounds[w].append(res)
    finally:
        for pool in pools.values():
            pool.close()
    out = {}
    for w in workers:
        rs = rounds[w]
        sps = [r["steps"] / r["step_s"] for r in rs if r["step_s"] > 0]
        out[f"{w}w"] = {
            "steps_per_s": statistics.median(sps) if sps else None,
            "reset_ms_per_episode": 1e3 * statistics.median(r["reset_s"] / r["episodes"] for r in rs),
            "cold_reset_ms_per_episode": 1e3 * cold[w]["reset_s"] / cold[w]["episodes"],
            "steps_per_round": statistics.median(r["steps"] for r in rs),
            "errors": sum(r["errors"] for r in rs),
            "pool_start_s": spawn_s[w],
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = _common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--envs", default="alfworld,webshop", help="comma-separated (default alfworld,webshop)")
    parser.add_argument("--episodes", type=int, default=None, help="episodes per round (default 8; smoke 2)")
    parser.add_argument("--steps", type=int, default=None, help="steps per episode per round (default 10; smoke 3)")
    parser.add_argument("--workers", default="0,1,2", help="pool sizes to compare (default 0,1,2)")
    parser.add_argument("--alfworld-data", default=None,
                        help="ALFWorld data root (default: $ALFWORLD_DATA, else the generated games)")
    parser.add_argument("--alfworld-split", default="train", help="ALFWorld split (default train)")
    args = parser.parse_args(argv)
    episodes = args.episodes or (2 if args.smoke else 8)
    steps = args.steps or (3 if args.smoke else 10)
    repeats = _common.repeats_of(args)
    workers = [int(w) for w in args.workers.split(",")]
    if 1 not in workers or 2 not in workers:
        raise SystemExit("--workers must include 1 and 2 (the headline compares them)")

    from skillduet_plugin.envs import make

    results: dict = {"workload": {"episodes_per_round": episodes, "max_steps_per_episode": steps,
                                  "workers": workers, "repeats": repeats, "warmup": args.warmup}}
    for env_name in [e.strip() for e in args.envs.split(",") if e.strip()]:
        if env_name == "alfworld":
            kwargs = {"split": args.alfworld_split, "max_steps": 50}
            if args.alfworld_data:
                kwargs["data_dir"] = args.alfworld_data
        else:
            kwargs = {"split": "train"}  # explicit: make() and the pool's factory call differ in default split
        env = make(env_name, **kwargs)
        tasks = list(env.tasks)
        env.close()
        # distinct tasks spread over the list (every task type for ALFWorld's type-sorted lists)
        stride = max(1, len(tasks) // episodes)
        task_ids = [tasks[(i * stride) % len(tasks)] for i in range(episodes)]
        results[env_name] = bench_env(env_name, kwargs, task_ids, workers, steps, repeats, max(args.warmup, 1))
        results[env_name]["tasks_available"] = len(tasks)
    head_env = "alfworld" if "alfworld" in results else next(k for k in results if k != "workload")
    speedup = results[head_env]["2w"]["steps_per_s"] / results[head_env]["1w"]["steps_per_s"]
    results["headline_env"] = head_env
    _common.report("env_pool_speedup_2w", speedup, results, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
