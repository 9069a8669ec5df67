"""Benchmark: peak resident memory (RSS) of one training step, SkillDuet (the demo's method) vs plain GRPO.

Each measurement is a fresh child process (so neither configuration inherits the other's allocator state):
it builds the trainer, runs one warm-up step, resets the kernel's peak-RSS counter, runs one measured step and
reports the peak. Children alternate A B A B ...; medians over the repeats. Reported: the process peak during
the step (what a machine must hold) and the step's increment over the RSS just before it (what the step
itself allocates). Headline: ``memory_peak_ratio`` = median SkillDuet peak / median GRPO peak.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import _common  # noqa: E402

METHODS = ("skillduet", "grpo")


def child(method: str, size: str, episodes: int, turns: int, threads: int) -> dict:
    """Runs inside the child process: warm-up step, reset the peak counter, measured step."""
    import torch

    from bench import _trainers

    if threads:
        torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory(prefix="skillduet-bench-mem-") as tmp:
        stepper = _trainers.Stepper(_trainers.make_trainer(Path(tmp) / method, method, size=size,
                                                           episodes=episodes, max_turns=turns))
        stepper.step()
        exact = _common.reset_peak_rss()
        before = _common.rss_bytes()
        stepper.step()
        peak = _common.peak_rss_bytes()
        lifecycle = getattr(stepper.trainer, "lifecycle", None)
        if lifecycle is not None and hasattr(lifecycle, "close"):
            lifecycle.close()
    return {"method": method, "rss_before_mb": before / 2**20, "peak_mb": peak / 2**20,
            "step_increment_mb": (peak - before) / 2**20, "peak_counter_reset": exact}


def main(argv: list[str] | None = None) -> int:
    parser = _common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--size", default="tiny", help="tiny model shape: tiny | small | base (default tiny)")
    parser.add_argument("--episodes", type=int, default=None, help="episodes per step (default 8; smoke 4)")
    parser.add_argument("--max-turns", type=int, default=None, help="policy turns per episode (default 3)")
    parser.add_argument("--child", choices=METHODS, default=None, help=argparse_hidden())
    args = parser.parse_args(argv)
    episodes = args.episodes or (4 if args.smoke else 8)
    turns = args.max_turns or (2 if args.smoke else 3)
    if args.child:
        print(json.dumps(child(args.child, args.size, episodes, turns, args.threads)))
        return 0
    _common.apply_threads(args)
    repeats = args.repeats if args.repeats is not None else (1 if args.smoke else 3 if args.quick else 5)
    samples: dict[str, list[dict]] = {m: [] for m in METHODS}
    for _ in range(repeats):
        for method in METHODS:  # interleaved: skillduet grpo skillduet grpo ...
            cmd = [sys.executable, str(Path(__file__).resolve()), "--child", method, "--size", args.size,
                   "--episodes", str(episodes), "--max-turns", str(turns), "--threads", str(args.threads)]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise SystemExit(f"memory child ({method}) failed with exit code {proc.returncode}:\n"
                                 f"{proc.stderr[-3000:]}")
            samples[method].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    summary = {m: {k: statistics.median(s[k] for s in samples[m])
                   for k in ("rss_before_mb", "peak_mb", "step_increment_mb")} for m in METHODS}
    ratio = summary["skillduet"]["peak_mb"] / summary["grpo"]["peak_mb"]
    results = {
        "workload": {"model_size": args.size, "episodes_per_step": episodes, "max_turns": turns,
                     "repeats": repeats, "analyzer": "offline"},
        "median_mb": summary,
        "step_increment_ratio": (summary["skillduet"]["step_increment_mb"] / summary["grpo"]["step_increment_mb"]
                                 if summary["grpo"]["step_increment_mb"] > 0 else None),
        "peak_counter_reset": all(s["peak_counter_reset"] for ss in samples.values() for s in ss),
        "samples": samples,
    }
    _common.report("memory_peak_ratio", ratio, results, args)
    return 0


def argparse_hidden() -> str:
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    raise SystemExit(main())
