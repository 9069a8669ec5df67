"""Benchmark: the step cost of the OPD estimators side by side (``skillduet.opd_estimator`` = sampled | choices |
topk), and GRPO, on the same tiny model, batch and generated ALFWorld games, in choose mode (where all three apply).

All trainers are ``SkillDuetGRPOTrainer`` with Local-only OPD (extraction + OPD; no scoring or Global, so the
difference is the estimator), and GRPO (``preset("grpo")``). Steps alternate in rotating order after a warm-up
round; the headline is median(choices step) / median(sampled step); every configuration's median step, its
phases and its ratio to GRPO are reported, with the load average. Policies drift apart after the first update, so
episode lengths differ a little between configurations: ``excl_rollout_s`` compares the rest.

    python bench/opd_estimators.py             # 8 episodes x 3 turns, 3 timed rounds
    python bench/opd_estimators.py --smoke
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import _common  # noqa: E402
from bench import _trainers  # noqa: E402

CONFIGS = (("grpo", "grpo", {}),
           ("sampled", "local_only", {"opd_estimator": "sampled"}),
           ("choices", "local_only", {"opd_estimator": "choices"}),
           ("topk", "local_only", {"opd_estimator": "topk"}))


def main(argv: list[str] | None = None) -> int:
    parser = _common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=None, help="episodes per step (default 8; smoke 4)")
    parser.add_argument("--group", type=int, default=4, help="GRPO group size (default 4)")
    parser.add_argument("--max-turns", type=int, default=None, help="policy turns per episode (default 3)")
    args = parser.parse_args(argv)
    _common.apply_threads(args)
    episodes = args.episodes or (4 if args.smoke else 8)
    turns = args.max_turns or (2 if args.smoke else 3)
    repeats = _common.repeats_of(args)
    load_before = _common.machine_conditions().get("load_avg")
    with tempfile.TemporaryDirectory(prefix="skillduet-bench-est-") as tmp:
        common = dict(env="alfworld", episodes=episodes, group=args.group, max_turns=turns, tokens_per_turn=32,
                      extra={"action_selection": "choose"})
        steppers = {name: _trainers.Stepper(_trainers.make_trainer(Path(tmp) / name, method, **common,
                                                                   skillduet_overrides=over))
                    for name, method, over in CONFIGS}
        _trainers.warm_env_caches("alfworld")
        rounds = _trainers.alternate(steppers, args.warmup, repeats)
        _trainers.close_lifecycles(steppers)
    breakdown = _trainers.median_breakdown(rounds)

    def med(name: str) -> float:
        return breakdown[name]["total_s"]

    results = {
        "workload": {"env": "alfworld (generated)", "action_selection": "choose", "episodes_per_step": episodes,
                     "group": args.group, "max_turns": turns, "repeats": repeats, "warmup": args.warmup,
                     "analyzer": "offline", "method": "Local-only OPD (no scoring, no Global)"},
        "breakdown_median_s": breakdown,
        "ratio_to_sampled": {name: med(name) / med("sampled") for name in rounds},
        "ratio_to_grpo": {name: med(name) / med("grpo") for name in rounds},
        "excl_rollout_ratio_to_sampled": {name: breakdown[name]["excl_rollout_s"]
                                          / breakdown["sampled"]["excl_rollout_s"] for name in rounds},
        "load_avg_before": load_before,
        "per_step_s": {name: [round(r["total"], 3) for r in rs] for name, rs in rounds.items()},
    }
    _common.report("opd_estimators", results["ratio_to_sampled"]["choices"], results, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
