"""Do CPU kernel settings change a run's arithmetic? A short warm start (the demo's cloning on a few games) run in
fresh processes under each setting, compared by the sha256 of the trained weights, with its time.

A run is deterministic for its seed on one machine, but torch picks its vectorised kernels (``ATEN_CPU_CAPABILITY``:
AVX-512 or AVX2) and MKL its code path by the CPU, and each rounds differently: two x86 CPUs can train different
weights from the same seed. Pinning both to AVX2 (``ATEN_CPU_CAPABILITY=avx2``, MKL's conditional numerical
reproducibility ``MKL_CBWR=AVX2``) makes an AVX-512 machine compute as an AVX2 one does; whether the weights then
match another machine's can only be checked on that machine (compare the printed digests).

    python bench/cpu_reproducibility.py                 # native, avx2, MKL_CBWR=AVX2, both (the command's)
    python bench/cpu_reproducibility.py --worker        # one run under the current environment (prints JSON)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import _common  # noqa: E402,F401  (offline environment variables)
from skillduet_plugin.core.cpu_kernels import PINNED, SWITCH  # noqa: E402

SETTINGS = {"native": {SWITCH: "native"},
            "aten_avx2": {SWITCH: "native", "ATEN_CPU_CAPABILITY": "avx2"},
            "mkl_cbwr_avx2": {SWITCH: "native", "MKL_CBWR": "AVX2"},
            "both_avx2": dict(PINNED)}  # both_avx2: what the skillduet command runs (core.cpu_kernels)


def worker(games: int, steps: int) -> dict:
    """Clone the tiny model on the searching expert's episodes of ``games`` generated train games for ``steps``
    steps (the demo's settings otherwise, one process, one thread) and return the weights' digest."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from skillduet_plugin.core.conversation import ChatTokenizer
    from skillduet_plugin.runs.config import load_run_config
    from skillduet_plugin.runs.environment import make_env
    from skillduet_plugin.runs.rundir import resolve_model
    from skillduet_plugin.warmstart.episodes import build_cloning_data, clone, plan_skill_sections, play_expert

    torch.set_num_threads(1)
    config = load_run_config(None, [])
    ws = config.warm_start
    base = resolve_model(config.model, seed=config.seed, env=config.env)
    chat = ChatTokenizer(AutoTokenizer.from_pretrained(base))
    env = make_env(config, config.train_split, games)
    try:
        records = [play_expert(env, t, max_turns=ws.max_turns or config.max_turns, seed=0)
                   for t in list(env.tasks)[:games]]
    finally:
        env.close()
    plans = plan_skill_sections(records, config.env, skill_fraction=ws.skill_fraction,
                                skill_token_budget=ws.skill_token_budget, seed=config.seed)
    episodes = build_cloning_data(records, config.env, chat, max_total_tokens=config.max_total_tokens, plans=plans,
                                  skill_token_budget=ws.skill_token_budget,
                                  skill_position=config.method_config().skill_position)
    torch.manual_seed(config.seed)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    t0 = time.perf_counter()
    stats = clone(model, episodes, steps=steps, batch_size=ws.batch_size, learning_rate=ws.learning_rate,
                  seed=config.seed, pad_token_id=chat.pad_token_id)
    seconds = time.perf_counter() - t0
    digest = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(p.detach().contiguous().numpy().tobytes())
    return {"sha256": digest.hexdigest()[:16], "loss_last": stats["loss_last"], "clone_seconds": round(seconds, 2),
            "cpu_capability": torch.backends.cpu.get_cpu_capability()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--games", type=int, default=8)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=2, help="runs per setting (the digest must repeat)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.games, args.steps)))
        return
    t0 = time.time()
    results: dict = {name: [] for name in SETTINGS}
    for _ in range(args.repeats):  # interleaved, so load changes hit every setting alike
        for name, extra in SETTINGS.items():
            env = {**{k: v for k, v in os.environ.items() if k not in PINNED and k != SWITCH}, **extra}
            out = subprocess.run([sys.executable, __file__, "--worker", "--games", str(args.games), "--steps",
                                  str(args.steps)], env=env, check=True, capture_output=True, text=True).stdout
            results[name].append(json.loads(out.strip().splitlines()[-1]))
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "unknown")
    _common.probe_output({"cpu": cpu, "games": args.games, "steps": args.steps, "results": results,
                          "machine": _common.machine_conditions()}, args.json, t0)


if __name__ == "__main__":
    main()
