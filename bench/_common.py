"""Shared helpers of the benchmark scripts: interleaved A/B timing with medians, peak RSS, machine conditions.

Every figure in ``docs/benchmarks.md`` is a ratio of two configurations measured in the same process run,
interleaved (A B A B ...) after a warm-up, and summarised by the median of the repeats, because the machines
these run on are shared and noisy.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from tqdm.auto import tqdm

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run as ``python bench/x.py`` from a checkout without installing
    sys.path.insert(0, str(REPO_ROOT))

from skillduet_plugin.core.cpu_kernels import pin_cpu_kernels  # noqa: E402  (the path above)

for _key, _value in (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"), ("TOKENIZERS_PARALLELISM", "false"),
                     ("TRL_EXPERIMENTAL_SILENCE", "1"), ("WANDB_MODE", "disabled"),
                     ("HF_HUB_DISABLE_TELEMETRY", "1")):
    os.environ.setdefault(_key, _value)
pin_cpu_kernels()  # the kernels the skillduet command runs (AVX2 on x86-64), before any torch import


@dataclass
class Timings:
    """Seconds per repeat of each named configuration, in the order they ran."""

    samples: dict[str, list[float]] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)

    def median(self, name: str) -> float:
        return statistics.median(self.samples[name])

    def ratio(self, numerator: str, denominator: str) -> float:
        """median(numerator) / median(denominator)."""
        return self.median(numerator) / self.median(denominator)

    def summary(self) -> dict[str, dict[str, float]]:
        out = {}
        for name, values in self.samples.items():
            out[name] = {"median_s": statistics.median(values), "min_s": min(values), "max_s": max(values),
                         "repeats": len(values)}
        return out


def interleaved(configs: Mapping[str, Callable[[], Any]], *, repeats: int = 5, warmup: int = 1,
                setup: Mapping[str, Callable[[], Any]] | None = None) -> Timings:
    """Time each configuration ``repeats`` times, interleaved A B A B ..., after ``warmup`` untimed rounds.

    ``setup[name]`` (optional) runs untimed right before each call of ``configs[name]`` (e.g. resetting state).
    A full garbage collection runs untimed before every call, so one configuration's garbage is not charged to
    the next.
    """
    if repeats < 1:
        raise ValueError(f"repeats={repeats} must be >= 1 (the issue asks for >= 5 outside smoke tests)")
    if warmup < 0:
        raise ValueError(f"warmup={warmup} must be >= 0")
    setup = setup or {}
    timings = Timings(samples={name: [] for name in configs})
    # progress on a terminal, updated outside the timed region (tqdm stays silent when stderr is not a terminal)
    bar = tqdm(total=(warmup + repeats) * len(configs), desc="bench", unit="run", leave=False, disable=None)
    for rnd in range(warmup + repeats):
        for name, fn in configs.items():
            if name in setup:
                setup[name]()
            gc.collect()
            start = time.perf_counter()
            fn()
            elapsed = time.perf_counter() - start
            if rnd >= warmup:
                timings.samples[name].append(elapsed)
                timings.order.append(name)
            bar.update(1)
    bar.close()
    return timings


def median(values: list[float]) -> float:
    return statistics.median(values)


def rss_bytes() -> int:
    """Current resident set size of this process (bytes), from ``/proc/self/status`` (``VmRSS``)."""
    return _status_kb("VmRSS") * 1024


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far (bytes, ``VmHWM``); see :func:`reset_peak_rss`."""
    return _status_kb("VmHWM") * 1024


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS counter of this process (Linux >= 4.0); False when not permitted."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _status_kb(key: str) -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    import resource  # fallback: ru_maxrss is the peak, in kB on Linux

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def machine_conditions() -> dict[str, Any]:
    """What the numbers were measured on: CPU count, load average, torch threads, versions."""
    info: dict[str, Any] = {"python": platform.python_version(), "platform": platform.platform(),
                            "cpu_count": os.cpu_count()}
    try:
        info["load_avg"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        info["load_avg"] = None
    try:
        import torch

        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
    except ImportError:
        pass
    return info


def base_parser(description: str) -> argparse.ArgumentParser:
    """Arguments every bench script takes: ``--quick``, ``--repeats``, ``--warmup``, ``--threads``, ``--json``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="small sizes: under 3 minutes on 2 cores")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, 1 repeat: seconds (tests only)")
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats per configuration (default 5)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds before timing (default 1)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads (default 1: on a shared, oversubscribed machine a second "
                             "OpenMP thread that gets descheduled stalls every op; 0 = torch's default)")
    parser.add_argument("--json", default=None, help="also write the full results to this JSON file")
    return parser


def repeats_of(args: argparse.Namespace) -> int:
    if args.repeats is not None:
        return args.repeats
    return 1 if args.smoke else 5


def apply_threads(args: argparse.Namespace) -> None:
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)


def report(name: str, value: float, results: Mapping[str, Any], args: argparse.Namespace) -> None:
    """Print the results table, write ``--json`` if asked, and end with the headline ``<name> <value>`` line."""
    results = dict(results)
    results["machine"] = machine_conditions()
    results[name] = value
    print(json.dumps(results, indent=2, default=str))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"{name} {value:.3g}" if isinstance(value, float) else f"{name} {value}", flush=True)


def warm_started(config: Any) -> tuple[Path, dict[str, Any]]:
    """The warm-started model of a run config (``runs.config.RunConfig``) and its info: the run's own cached
    clone (the one ``skillduet train`` with that config starts RL from), built on first use with the run's
    worker processes (``warm_start.workers``)."""
    from skillduet_plugin.runs.environment import make_env
    from skillduet_plugin.runs.rundir import cache_dir, resolve_model
    from skillduet_plugin.runs.trl_runner import cloning_workers, warm_start_settings
    from skillduet_plugin.warmstart.cache import warm_start_model

    return warm_start_model(resolve_model(config.model, seed=config.seed, env=config.env),
                            make_env=lambda n: make_env(config, config.train_split, n),
                            cache_root=cache_dir(), workers=cloning_workers(config), **warm_start_settings(config))


def probe_output(out: Mapping[str, Any], json_path: str | None, t0: float) -> None:
    """Print a probe's result with its time and the load average, and write it to ``json_path`` when given."""
    out = {**out, "seconds": round(time.time() - t0, 1), "load1": os.getloadavg()[0]}
    print(json.dumps(out, indent=1))
    if json_path:
        Path(json_path).write_text(json.dumps(out, indent=1))
