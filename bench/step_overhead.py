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

``--regime`` picks the state of SkillDuet's bank: ``none`` (no Global within these few steps, the paper's schedule),
``global`` (the bank seeded with a Global at ``--global-tokens`` for every scope of the games, so every rollout
prompt carries it from the first step: the steady state of a long run; ``bench/_global_regime.py``) or ``both``
(two SkillDuet trainers beside the one GRPO trainer). ``regimes.<regime>`` holds each ratio, its phase ratios
and the mean first-prompt and whole-episode tokens; ``step_overhead_global`` the global regime's ratio.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import _common  # noqa: E402
from bench import _global_regime  # noqa: E402

REGIME_CONFIG = _global_regime.REGIME_CONFIG
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
    _global_regime.add_regime_arguments(parser, (
        "none: no Global within the run (the paper's schedule over a few steps); global: the "
        "bank seeded before the run with a Global at --global-tokens for every scope, so every "
        "rollout prompt carries it (the steady state); both: the two side by side, one GRPO"))
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
    regimes = [r for r in ("none", "global") if args.regime in (r, "both")]
    if "global" in regimes:
        print(f"global regime: a seeded Global of skill_token_budget={args.global_tokens} tokens", flush=True)

    load_before = _common.machine_conditions().get("load_avg")
    seeded = None
    with tempfile.TemporaryDirectory(prefix="skillduet-bench-") as tmp:
        configs = [(REGIME_CONFIG[r], "skillduet", {"skill_token_budget": args.global_tokens} if r == "global" else {})
                   for r in regimes] + [("grpo", "grpo", {})]
        if args.local_only:  # OPD teacher + extraction, no scoring / Global: the extras that must exist
            configs.insert(1, ("local_only", "local_only", {}))
        if args.pairwise:  # the previous estimator: one forward per (candidate, held-out trajectory) pair
            configs.insert(1, ("skillduet_pairwise", "skillduet", {"heldout": "same_scope"}))
        common = dict(size=args.size, env=args.env, episodes=episodes, group=args.group, max_turns=turns,
                      tokens_per_turn=args.tokens_per_turn, consolidation_interval=args.consolidation_interval)
        steppers = {name: _trainers.Stepper(_trainers.make_trainer(Path(tmp) / name, method, **common,
                                                                   skillduet_overrides=over))
                    for name, method, over in configs}
        if "global" in regimes:  # the steady state: a Global at its budget in every rollout prompt from step 1
            lifecycle = steppers["skillduet_global"].trainer.lifecycle
            scopes = _global_regime.game_scopes(args.env, lifecycle.config.scope)
            seeded = _global_regime.seed_globals(lifecycle.bank, scopes, args.global_tokens, lifecycle.tokenizer)
            lifecycle.reload()
        _trainers.warm_env_caches(args.env)  # every game parsed once: no configuration pays cold loads
        rounds = _trainers.alternate(steppers, args.warmup, repeats)
        # Consolidation runs every ``interval`` steps, so the timed steps above may hold none: time one on the
        # bank as it stands (the candidates of these steps) and amortise it over the interval.
        sd = steppers[REGIME_CONFIG[regimes[0]]]
        interval = args.consolidation_interval
        next_due = (sd.trainer.state.global_step // interval + 1) * interval
        sd.trainer.lifecycle.end_step(next_due)  # timed as "consolidation" by the Stepper's wrapper
        consolidation_once_s = sd.timer.take().get("consolidation", 0.0)
        tokens = {name: {"first_prompt_tokens_mean": _mean(st.prompt_tokens[-repeats:]),
                         "episode_tokens_mean": _mean(st.episode_tokens[-repeats:])}
                  for name, st in steppers.items()}
        _trainers.close_lifecycles(steppers)

    def med(name: str, key: str) -> float:
        return statistics.median(r.get(key, 0.0) for r in rounds[name])

    breakdown = _trainers.median_breakdown(rounds)
    per_regime = {r: regime_summary(rounds, breakdown, REGIME_CONFIG[r]) for r in regimes}
    for r in regimes:
        per_regime[r]["tokens"] = {"skillduet": tokens[REGIME_CONFIG[r]], "grpo": tokens["grpo"]}
    if seeded is not None:
        per_regime["global"]["seeded_global"] = {"skill_token_budget": seeded.budget, "tokens": seeded.tokens,
                                                 "scopes": list(seeded.scopes)}
    head = per_regime[regimes[0]]
    sd_name = REGIME_CONFIG[regimes[0]]
    ratio = head["step_overhead"]
    results = {
        "workload": {"model_size": args.size, "env": args.env, "episodes_per_step": episodes, "group": args.group,
                     "max_turns": turns, "tokens_per_turn": args.tokens_per_turn, "repeats": repeats,
                     "warmup": args.warmup, "consolidation_interval": args.consolidation_interval,
                     "analyzer": "offline", "regime": args.regime},
        "regimes": per_regime,
        "breakdown_median_s": breakdown,
        "overhead_excl_rollout": head["overhead_excl_rollout"],
        "rollout_ratio": head["rollout_ratio"],
        "median_of_pair_ratios": head["median_of_pair_ratios"],
        "pair_ratio_min": head["pair_ratio_min"], "pair_ratio_max": head["pair_ratio_max"],
        "local_only_ratio": med("local_only", "total") / med("grpo", "total") if "local_only" in rounds else None,
        "pairwise_ratio": (med("skillduet_pairwise", "total") / med("grpo", "total")
                           if "skillduet_pairwise" in rounds else None),
        "scoring_share": med(sd_name, "scoring") / med("grpo", "total"),
        "load_avg_before": load_before,
        "load_avg_after": _common.machine_conditions().get("load_avg"),
        "consolidation_once_s": consolidation_once_s,
        "ratio_with_amortised_consolidation": ((med(sd_name, "total") + consolidation_once_s / interval)
                                               / med("grpo", "total")),
        "per_step_s": {name: [round(r["total"], 3) for r in rs] for name, rs in rounds.items()},
    }
    if "global" in per_regime:
        results["step_overhead_global"] = per_regime["global"]["step_overhead"]
    if args.sdpo:
        results["single_turn"] = single_turn_block(args, episodes, repeats)
    _common.report("step_overhead", ratio, results, args)
    return 0


def regime_summary(rounds: dict[str, list[dict[str, float]]], breakdown: dict[str, dict[str, float]],
                   name: str) -> dict[str, float | None]:
    """SkillDuet configuration ``name`` against GRPO: the step ratio of medians, the per-round ratios, the rest of
    the step without the rollout, and the rollout's own ratio."""
    pair = [a["total"] / b["total"] for a, b in zip(rounds[name], rounds["grpo"])]
    sd, grpo = breakdown[name], breakdown["grpo"]
    return {"step_overhead": sd["total_s"] / grpo["total_s"],
            "overhead_excl_rollout": sd["excl_rollout_s"] / grpo["excl_rollout_s"],
            "rollout_ratio": sd.get("rollout_s", 0.0) / grpo["rollout_s"] if grpo.get("rollout_s") else None,
            "median_of_pair_ratios": statistics.median(pair), "pair_ratio_min": min(pair),
            "pair_ratio_max": max(pair),
            "phase_ratios": {k: (sd[k] / grpo[k] if grpo.get(k) else None) for k in sd if k.endswith("_s")}}


def _mean(values: list[float]) -> float | None:
    return statistics.mean(values) if values else None


if __name__ == "__main__":
    raise SystemExit(main())
