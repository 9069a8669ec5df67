"""Benchmark: one training step (rollout + update) of SkillDuet vs plain GRPO, same tiny model, batch and
episodes, on CPU, with a per-phase breakdown (rollout, teacher pass, loss, extraction, scoring, consolidation).

All trainers are ``SkillDuetGRPOTrainer``: SkillDuet with the paper defaults and the offline analyzer,
GRPO with ``config.preset("grpo")`` (no extraction, teacher, scoring or Global), and Local-only
(``preset("local_only")``: extraction + OPD teacher pass, no scoring or Global) to separate the teacher
forward, which must exist, from the Strength scoring. Every game's engine cache is warmed first (untimed),
then steps alternate in rotating order (A B C, B C A, ...) after a warm-up round; each step's ratio uses that
round's pair. Both trainers sample with the same seed, but their policies drift apart after the first update,
so episode lengths differ: the rollout phase (same code in both) is reported separately and
``overhead_excl_rollout`` compares the rest. SkillDuet scores with the default ``heldout="teacher"`` (Strength
from the teacher pass); ``--pairwise`` adds the pairwise estimator (``heldout="same_scope"``) as a fourth
configuration. Headline: ``step_overhead`` = median(SkillDuet step) /
median(GRPO step); ``pair_ratio_min/max`` is the spread of the per-round ratios.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import _common  # noqa: E402
from bench import _trainers  # noqa: E402


def single_turn_block(args, episodes: int, repeats: int) -> dict:
    """SkillDuet, GRPO (preset), TRL GRPOTrainer and TRL SDPOTrainer, one turn each, same prompts and batch."""
    tokens = args.tokens_per_turn * 3
    prompts = _trainers.single_turn_prompts(max(2, episodes // args.group) * 4)
    with tempfile.TemporaryDirectory(prefix="skillduet-bench-st-") as tmp:
        trainers = {
            "skillduet_1turn": _trainers.make_trainer(Path(tmp) / "sd", "skillduet", size=args.size,
                                                      episodes=episodes, group=args.group, max_turns=1,
                                                      tokens_per_turn=tokens),
            "grpo_1turn": _trainers.make_trainer(Path(tmp) / "gr", "grpo", size=args.size, episodes=episodes,
                                                 group=args.group, max_turns=1, tokens_per_turn=tokens),
            "trl_grpo": _trainers.make_trl_trainer(Path(tmp) / "tg", "grpo", prompts, size=args.size,
                                                   episodes=episodes, group=args.group, max_completion_length=tokens),
            "trl_sdpo": _trainers.make_trl_trainer(Path(tmp) / "ts", "sdpo", prompts, size=args.size,
                                                   episodes=episodes, group=args.group, max_completion_length=tokens),
        }
        steppers = {name: _trainers.Stepper(t) for name, t in trainers.items()}
        totals: dict[str, list[float]] = {name: [] for name in steppers}
        for rnd in range(args.warmup + repeats):
            for name, stepper in steppers.items():
                phases = stepper.step()
                if rnd >= args.warmup:
                    totals[name].append(phases["total"])
        lifecycle = getattr(trainers["skillduet_1turn"], "lifecycle", None)
        if lifecycle is not None and hasattr(lifecycle, "close"):
            lifecycle.close()
    med = {name: statistics.median(v) for name, v in totals.items()}
    return {"note": "single-turn: SDPO cannot play multi-turn episodes; same prompts (first ALFWorld turns), "
                    "batch, completion budget; TRL trainers use a deterministic coin-flip reward",
            "median_step_s": med,
            "sdpo_over_trl_grpo": med["trl_sdpo"] / med["trl_grpo"],
            "skillduet_over_grpo_1turn": med["skillduet_1turn"] / med["grpo_1turn"],
            "skillduet_1turn_over_trl_sdpo": med["skillduet_1turn"] / med["trl_sdpo"]}


def main(argv: list[str] | None = None) -> int:
    parser = _common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--size", default="tiny", help="tiny model shape: tiny | small | base (default tiny)")
    parser.add_argument("--env", default="alfworld", help="alfworld (generated games, real engine) | webshop")
    parser.add_argument("--episodes", type=int, default=None, help="episodes per step (default 8; smoke 4)")
    parser.add_argument("--group", type=int, default=4, help="GRPO group size (default 4)")
    parser.add_argument("--max-turns", type=int, default=None, help="policy turns per episode (default 3)")
    parser.add_argument("--tokens-per-turn", type=int, default=16, help="max new tokens per turn (default 16)")
    parser.add_argument("--consolidation-interval", type=int, default=10,
                        help="SkillDuet consolidation interval (default 10, the paper's)")
    parser.add_argument("--no-local-only", dest="local_only", action="store_false",
                        help="skip the third configuration (Local-only: teacher pass without scoring or Global)")
    parser.add_argument("--pairwise", action="store_true",
                        help="also run SkillDuet with the pairwise Strength estimator (heldout=same_scope)")
    parser.add_argument("--sdpo", action="store_true",
                        help="also compare TRL's SDPOTrainer with TRL's GRPOTrainer and SkillDuet with GRPO on a "
                             "matched single-turn batch (SDPO is single-turn)")
    args = parser.parse_args(argv)
    _common.apply_threads(args)
    episodes = args.episodes or (4 if args.smoke else 8)
    turns = args.max_turns or (2 if args.smoke else 3)
    repeats = _common.repeats_of(args)

    load_before = _common.machine_conditions().get("load_avg")
    with tempfile.TemporaryDirectory(prefix="skillduet-bench-") as tmp:
        configs = [("skillduet", "skillduet", {}), ("grpo", "grpo", {})]
        if args.local_only:  # OPD teacher + extraction, no scoring / Global: the extras that must exist
            configs.insert(1, ("local_only", "local_only", {}))
        if args.pairwise:  # the previous estimator: one forward per (candidate, held-out trajectory) pair
            configs.insert(1, ("skillduet_pairwise", "skillduet", {"heldout": "same_scope"}))
        common = dict(size=args.size, env=args.env, episodes=episodes, group=args.group, max_turns=turns,
                      tokens_per_turn=args.tokens_per_turn, consolidation_interval=args.consolidation_interval)
        steppers = {name: _trainers.Stepper(_trainers.make_trainer(Path(tmp) / name, method, **common,
                                                                   skillduet_overrides=over))
                    for name, method, over in configs}
        _trainers.warm_env_caches(args.env)  # every game parsed once: no configuration pays cold loads
        rounds = _trainers.alternate(steppers, args.warmup, repeats)
        # Consolidation runs every ``interval`` steps, so the timed steps above may hold none: time one on the
        # bank as it stands (the candidates of these steps) and amortise it over the interval.
        sd = steppers["skillduet"]
        interval = args.consolidation_interval
        next_due = (sd.trainer.state.global_step // interval + 1) * interval
        sd.trainer.lifecycle.end_step(next_due)  # timed as "consolidation" by the Stepper's wrapper
        consolidation_once_s = sd.timer.take().get("consolidation", 0.0)
        for stepper in steppers.values():
            lifecycle = getattr(stepper.trainer, "lifecycle", None)
            if lifecycle is not None and hasattr(lifecycle, "close"):
                lifecycle.close()

    def med(name: str, key: str) -> float:
        return statistics.median(r.get(key, 0.0) for r in rounds[name])

    phases = sorted({k for rs in rounds.values() for r in rs for k in r} - {"total"})
    breakdown = {name: {"total_s": med(name, "total"), **{f"{p}_s": med(name, p) for p in phases}}
                 for name in rounds}
    for name in rounds:
        rest = [r["total"] - r.get("rollout", 0.0) for r in rounds[name]]
        breakdown[name]["excl_rollout_s"] = statistics.median(rest)
    ratio = med("skillduet", "total") / med("grpo", "total")
    amortised = (med("skillduet", "total") + consolidation_once_s / args.consolidation_interval) / med("grpo", "total")
    pair_ratios = [a["total"] / b["total"] for a, b in zip(rounds["skillduet"], rounds["grpo"])]
    results = {
        "workload": {"model_size": args.size, "env": args.env, "episodes_per_step": episodes, "group": args.group,
                     "max_turns": turns, "tokens_per_turn": args.tokens_per_turn, "repeats": repeats,
                     "warmup": args.warmup, "consolidation_interval": args.consolidation_interval,
                     "analyzer": "offline"},
        "breakdown_median_s": breakdown,
        "overhead_excl_rollout": breakdown["skillduet"]["excl_rollout_s"] / breakdown["grpo"]["excl_rollout_s"],
        "rollout_ratio": (breakdown["skillduet"].get("rollout_s", 0.0) / breakdown["grpo"]["rollout_s"]
                          if breakdown["grpo"].get("rollout_s") else None),
        "median_of_pair_ratios": statistics.median(pair_ratios),
        "pair_ratio_min": min(pair_ratios), "pair_ratio_max": max(pair_ratios),
        "local_only_ratio": med("local_only", "total") / med("grpo", "total") if "local_only" in rounds else None,
        "pairwise_ratio": (med("skillduet_pairwise", "total") / med("grpo", "total")
                           if "skillduet_pairwise" in rounds else None),
        "scoring_share": med("skillduet", "scoring") / med("grpo", "total"),
        "load_avg_before": load_before,
        "consolidation_once_s": consolidation_once_s,
        "ratio_with_amortised_consolidation": amortised,
        "per_step_s": {name: [round(r["total"], 3) for r in rs] for name, rs in rounds.items()},
    }
    if args.sdpo:
        results["single_turn"] = single_turn_block(args, episodes, repeats)
    _common.report("step_overhead", ratio, results, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
