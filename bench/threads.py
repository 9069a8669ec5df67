"""Benchmark: torch intra-op threads against a competing busy process, on the warm start's workload.

One configuration = (torch threads, busy competitors). Each runs ``--steps`` cloning steps of the CPU demo's
tiny model (batch 4 of ``--length``-token sequences, forward + backward + AdamW) in a fresh child process, so
that the thread pool is created with the wanted size; competitors are plain Python busy loops started before
and killed after. Reports seconds per step (median over steps after a warm-up) and the final loss's bits, so
that a changed thread count that changes the numbers shows up too.

    python bench/threads.py --steps 12            # threads 1 and 2, with 0 and 1 busy competitors
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BUSY = "while True: pass"


def _child(threads: int, steps: int, length: int, model_dir: str, queue: "mp.Queue") -> None:
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    times, loss = [], None
    for _ in range(steps):
        ids = torch.randint(0, vocab, (4, length), generator=gen)
        t0 = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optim.step()
        optim.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
    queue.put({"threads": threads, "s_per_step": statistics.median(times[2:] or times),
               "max_s": max(times[2:] or times), "loss": float(loss.detach()).hex()})


def measure(threads: int, busy: int, steps: int, length: int, model_dir: str) -> dict:
    competitors = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(busy)]
    try:
        time.sleep(0.5 if busy else 0.0)
        queue: mp.Queue = mp.get_context("spawn").Queue()
        proc = mp.get_context("spawn").Process(target=_child, args=(threads, steps, length, model_dir, queue))
        proc.start()
        result = queue.get()
        proc.join()
    finally:
        for c in competitors:
            c.kill()
            c.wait()
    return {**result, "busy": busy, "load1": round(os.getloadavg()[0], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--length", type=int, default=1500, help="tokens per sequence (a demo episode: ~1,500)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--busy", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--rounds", type=int, default=2, help="interleaved repeats of every configuration")
    parser.add_argument("--omp-wait-policy", choices=("active", "passive"), default=None,
                        help="OMP_WAIT_POLICY of the measured child (default: unset, libgomp spins then sleeps)")
    args = parser.parse_args()
    if args.omp_wait_policy:
        os.environ["OMP_WAIT_POLICY"] = args.omp_wait_policy.upper()  # read when the spawned child loads torch
    from skillduet_plugin.warmstart.tiny_model import build_tiny

    model_dir = str(build_tiny(Path(tempfile.mkdtemp()) / "tiny"))
    rows = []
    for _round in range(args.rounds):
        for busy in args.busy:
            for threads in args.threads:
                row = measure(threads, busy, args.steps, args.length, model_dir)
                rows.append(row)
                print(json.dumps(row), flush=True)
    print("\n| threads | busy competitors | s/step (median of rounds) | worst step |")
    print("|---|---|---|---|")
    for busy in args.busy:
        for threads in args.threads:
            mine = [r for r in rows if r["threads"] == threads and r["busy"] == busy]
            print(f"| {threads} | {busy} | {statistics.median(r['s_per_step'] for r in mine):.3f} | "
                  f"{max(r['max_s'] for r in mine):.3f} |")
    losses = {(r["threads"]): r["loss"] for r in rows}
    print(f"\nfinal loss bits per thread count: {losses}")
    if 1 in args.threads and 2 in args.threads and 1 in args.busy:
        def med(t: int) -> float:
            return statistics.median(r["s_per_step"] for r in rows if r["threads"] == t and r["busy"] == 1)

        print(f"busy_2_threads_over_1 {med(2) / med(1):.2f}")


if __name__ == "__main__":
    main()
