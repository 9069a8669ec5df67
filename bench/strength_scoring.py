"""Benchmark: what Strength scoring costs per training step, and the pairwise estimator vs a naive loop.

Headline (``scoring_share``): SkillDuet (default ``heldout="teacher"``), SkillDuet with the pairwise estimator
(``heldout="same_scope"``) and plain GRPO step alternately on the tiny model (``bench._trainers``);
``scoring_share`` = median(seconds of the scoring phase of a SkillDuet step) / median(GRPO step seconds);
``pairwise_scoring_share`` is the same for the pairwise estimator.

Then K Local candidates on N held-out trajectories, pairwise estimator, two configurations, interleaved:

- ``naive``: for every (skill, trajectory) pair, build the teacher context, run one model forward over
  context + completion, take a full-vocabulary ``log_softmax`` and read the completion tokens.
- ``product``: ``skills.scoring.score_skills`` (what the lifecycle runs each step): contexts built per pair,
  then ONE ``core.logprobs.response_logprobs`` call over all pairs.
The base log-probs are the trajectories' old log-probs (``Trajectory.base_logps``), computed once, untimed,
as the trainer provides them. Scores must agree to 1e-5; ``strength_scoring_speedup`` = median(naive) /
median(product).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import _common  # noqa: E402
from bench import _synthetic  # noqa: E402


def naive_strengths(model, skills, trajectories, context_fn) -> dict[str, float | None]:
    """One forward and a full log-softmax per (skill, trajectory) pair; Strength = mean |shift|."""
    import torch

    from skillduet_plugin.core.scores import strength

    out = {}
    with torch.no_grad():
        for skill in skills:
            shifts = []
            for r in trajectories:
                ctx = context_fn(r, skill)
                ids = torch.tensor([list(ctx) + list(r.completion_ids)], dtype=torch.long)
                logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)
                n = len(r.completion_ids)
                pos = torch.arange(len(ctx) - 1, len(ctx) - 1 + n)
                tok = torch.tensor(r.completion_ids, dtype=torch.long)
                skill_lp = logp[pos, tok]
                base = torch.tensor(r.base_logps, dtype=torch.float32)
                mask = torch.tensor(r.completion_mask, dtype=torch.float32)
                shifts.append(float(((skill_lp - base) * mask).sum() / mask.sum()))
            out[skill.skill_id] = strength(shifts)
    return out


def step_shares(args, repeats: int) -> dict:
    """Scoring seconds per SkillDuet step (both estimators) over GRPO seconds per step, stepped A B C A B C."""
    import statistics
    import tempfile

    from bench import _trainers

    episodes = 4 if args.smoke else 8
    common = dict(size=args.size, episodes=episodes, group=4, max_turns=2 if args.smoke else 3,
                  tokens_per_turn=16, consolidation_interval=10)
    configs = [("skillduet", "skillduet", {}), ("skillduet_pairwise", "skillduet", {"heldout": "same_scope"}),
               ("grpo", "grpo", {})]
    with tempfile.TemporaryDirectory(prefix="skillduet-bench-share-") as tmp:
        steppers = {name: _trainers.Stepper(_trainers.make_trainer(Path(tmp) / name, method, **common,
                                                                   skillduet_overrides=over))
                    for name, method, over in configs}
        _trainers.warm_env_caches("alfworld")  # every game parsed once: no configuration pays cold loads
        rounds = _trainers.alternate(steppers, args.warmup, repeats)
        metrics = steppers["skillduet"].trainer.lifecycle.metrics()
        for stepper in steppers.values():
            if getattr(stepper.trainer, "lifecycle", None) is not None:
                stepper.trainer.lifecycle.close()

    def med(name: str, key: str) -> float:
        return statistics.median(r.get(key, 0.0) for r in rounds[name])

    grpo = med("grpo", "total")
    per_round = [a.get("scoring", 0.0) / b["total"] for a, b in zip(rounds["skillduet"], rounds["grpo"])]
    return {"workload": common, "repeats": repeats,
            "median_s": {name: {"total": med(name, "total"), "scoring": med(name, "scoring")} for name in rounds},
            "scoring_share": med("skillduet", "scoring") / grpo,
            "scoring_share_per_round": [round(x, 4) for x in per_round],
            "pairwise_scoring_share": med("skillduet_pairwise", "scoring") / grpo,
            "last_step_scoring_metrics": {k: v for k, v in metrics.items() if "scoring" in k or "heldout" in k
                                          or "unscored" in k}}


def main(argv: list[str] | None = None) -> int:
    parser = _common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=None, help="candidates (default 32; smoke 4)")
    parser.add_argument("--n", type=int, default=None, help="held-out trajectories (default 16; smoke 3)")
    parser.add_argument("--size", default="tiny", help="tiny model shape: tiny | small | base (default tiny)")
    parser.add_argument("--turns", type=int, default=None,
                        help="policy turns per trajectory (default 3; --quick 1; --smoke 1)")
    parser.add_argument("--token-budget", type=int, default=8192, help="response_logprobs token_budget")
    args = parser.parse_args(argv)
    _common.apply_threads(args)
    k = args.k or (4 if args.smoke else 32)
    n = args.n or (3 if args.smoke else 16)
    turns = args.turns or (1 if (args.smoke or args.quick) else 3)
    repeats = _common.repeats_of(args)
    load_before = _common.machine_conditions().get("load_avg")
    shares = step_shares(args, repeats)

    import torch

    from skillduet_plugin.core.logprobs import response_logprobs
    from skillduet_plugin.skills.scoring import score_skills

    tokenizer, model = _synthetic.load_model(args.size)
    trajectories = _synthetic.make_trajectories(tokenizer, n, turns=turns)
    skills = _synthetic.make_skills(k)
    context_fn = _synthetic.ContextBuilder(tokenizer)
    with torch.no_grad():  # the trainer's old log-probs: computed once, not timed
        base = response_logprobs(model, [t.prompt_ids for t in trajectories],
                                 [t.completion_ids for t in trajectories], pad_token_id=tokenizer.pad_token_id)
    for t, lp in zip(trajectories, base):
        t.base_logps = lp.tolist()

    def logprob_fn(contexts, responses):
        with torch.no_grad():
            return response_logprobs(model, contexts, responses, token_budget=args.token_budget,
                                     pad_token_id=tokenizer.pad_token_id)

    pairs = [(s, r) for s in skills for r in trajectories]
    lengths = [len(context_fn(r, s)) + len(r.completion_ids) for s, r in pairs]
    results: dict = {}

    def run_naive():
        results["naive"] = naive_strengths(model, skills, trajectories, context_fn)

    def run_product():
        scores = score_skills(skills, trajectories, logprob_fn, context_fn, policy="any", max_heldout=n)
        results["product"] = {sid: s.strength for sid, s in scores.items()}

    def run_contexts():  # the tokenisation share of the product path (chat template + injector per pair)
        for s, r in pairs:
            context_fn(r, s)

    timings = _common.interleaved({"naive": run_naive, "product": run_product, "contexts_only": run_contexts},
                                  repeats=repeats, warmup=args.warmup)
    max_diff = max(abs(results["naive"][s.skill_id] - results["product"][s.skill_id]) for s in skills)
    speedup = timings.ratio("naive", "product")
    summary = {
        "load_avg_before": load_before,
        "per_step": shares,
        "strength_scoring_speedup": speedup,
        "workload": {"k": k, "n": n, "pairs": len(pairs), "model_size": args.size,
                     "params": sum(p.numel() for p in model.parameters()), "turns": turns,
                     "mean_seq_tokens": sum(lengths) / len(lengths),
                     "mean_completion_tokens": sum(len(r.completion_ids) for r in trajectories) / n},
        "timings": timings.summary(),
        "max_abs_strength_diff": max_diff,
        "scores_identical_1e-5": max_diff <= 1e-5,
    }
    if max_diff > 1e-5:
        print(f"WARNING: batched and naive Strength differ by {max_diff:.2e} (> 1e-5)", file=sys.stderr)
    _common.report("scoring_share", shares["scoring_share"], summary, args)
    return 0 if max_diff <= 1e-5 else 1


if __name__ == "__main__":
    raise SystemExit(main())
