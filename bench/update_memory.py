"""Benchmark: peak resident memory (RSS) of a real run's RL steps, the whole batch in one pass vs ``micro_batch``.

A run's update holds the activations of every episode of the step at once (``tasks_per_step x num_generations``
sequences of up to ``max_total_tokens``; on CPU, sdpa attention materialises each layer's full attention and the
repeated keys/values of grouped-query attention). ``micro_batch`` slices the update into accumulated passes. Each
measurement is ``skillduet train CONFIG`` in a fresh child process (the config's warm-started model, built or
read from the cache first; no evaluations, no checkpoints), its peak RSS read from the kernel when it exits.
Children alternate (whole, sliced, whole, ...). Also reported: each step's logged loss, reward and gate mean per
setting, which must agree (the slices add up to the same optimizer step). Headline: ``update_memory_ratio`` =
median sliced peak / median whole peak.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import _common  # noqa: E402

KEYS = ("loss", "reward", "opd/gate_mean", "opd/loss")


def run_child(config: str, overrides: list[str], out: Path) -> tuple[float, list[dict]]:
    """Run ``skillduet train`` as a child; its peak RSS (MiB, the kernel's ``ru_maxrss`` from ``wait4``) and its
    per-step metrics."""
    cmd = [sys.executable, "-m", "skillduet_plugin.cli", "train", config, *overrides, "--output-dir", str(out)]
    out.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f"{out.name}.log", "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, so Popen must not wait again
    if proc.returncode != 0:
        tail = (out.parent / f"{out.name}.log").read_text()[-3000:]
        raise SystemExit(f"child `{' '.join(cmd)}` failed with exit code {proc.returncode}:\n{tail}")
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [{k: s.get(k) for k in ("step", *KEYS)} for s in steps if s.get("step") and "loss" in s]
    return usage.ru_maxrss / 1024, steps


def main(argv: list[str] | None = None) -> int:
    parser = _common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("config", help="a run config file (e.g. examples/study_alfworld_reading30.yaml)")
    parser.add_argument("--micro-batch", type=int, default=8, help="the sliced setting (default 8)")
    parser.add_argument("--steps", type=int, default=2, help="RL steps per child (default 2)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="extra run-config overrides for every child (repeatable)")
    args = parser.parse_args(argv)
    repeats = args.repeats if args.repeats is not None else 1
    from skillduet_plugin.runs.config import load_run_config

    config = load_run_config(args.config, args.set)
    model = config.model
    if config.warm_start_enabled:
        model = str(_common.warm_started(config)[0])
    common = [*args.set, f"model={json.dumps(model)}", "warm_start.enabled=false", f"steps={args.steps}",
              "eval_before=false", "eval_after=false", "eval_teacher=false", "save_steps=0",
              f"threads={args.threads}"]
    settings = {"whole": "micro_batch=0", "sliced": f"micro_batch={args.micro_batch}"}
    samples: dict[str, list[dict]] = {name: [] for name in settings}
    with tempfile.TemporaryDirectory(prefix="skillduet-bench-update-mem-") as tmp:
        for r in range(repeats):
            for name, setting in settings.items():  # interleaved: whole sliced whole sliced ...
                peak, steps = run_child(args.config, [*common, setting], Path(tmp) / f"{name}-{r}")
                samples[name].append({"peak_mb": peak, "steps": steps})
                print(f"{name} repeat {r}: peak {peak:.0f} MiB", flush=True)
    median = {name: statistics.median(s["peak_mb"] for s in ss) for name, ss in samples.items()}
    first = {name: ss[0]["steps"] for name, ss in samples.items()}
    results = {
        "workload": {"config": args.config, "overrides": args.set, "steps": args.steps, "repeats": repeats,
                     "batch": config.tasks_per_step * config.num_generations, "micro_batch": args.micro_batch,
                     "max_total_tokens": config.max_total_tokens, "threads": args.threads},
        "median_peak_mb": median,
        "steps_first_repeat": first,
        "samples": samples,
    }
    _common.report("update_memory_ratio", median["sliced"] / median["whole"], results, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
