"""Benchmark: does Strength from the teacher pass rank candidates like the pairwise estimator, on a recorded run?

Reads a run folder written by ``skillduet train`` (``RUN_DIR/trajectories/step_*.jsonl``, the skill bank with
each step's Local candidates and the trajectories' teacher assignment ``local_skill_id``), and rescores every
step's candidates with one model (default: the run's final policy) under three estimators:

- ``pairwise``: ``heldout="same_scope"``, ``max_heldout`` rows per candidate (the previous default);
- ``teacher``: ``heldout="teacher"`` with the default ``scoring_budget`` (the new default);
- ``teacher_free``: ``heldout="teacher"``, no budget cap (every candidate without free rows gets its extra rows),
  which separates the choice of rows from the budget's effect.
Both log-prob terms are recomputed with the same model for every estimator (the teacher rows equal what the
teacher pass computes under those weights). Per consolidation window and scope: Spearman rank correlation over
candidates both estimators scored, and the overlap of the top 50% each would keep (``core.scores.select_top``;
unscored candidates rank last, as at consolidation), and the same pooled over all scopes of the window.
Headline: ``rank_spearman_median`` (teacher vs pairwise, per scope with at least 3 candidates both scored).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ESTIMATORS = {"pairwise": {"heldout": "same_scope"}, "teacher": {"heldout": "teacher"},
              "teacher_free": {"heldout": "teacher", "scoring_budget": 1e6}}


def ranks(values: list[float]) -> list[float]:
    """Average ranks (1-based), ties sharing the mean of their positions."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(a: list[float], b: list[float]) -> float | None:
    """Spearman's rho (Pearson correlation of average ranks); None below 3 pairs or for a constant side."""
    if len(a) < 3:
        return None
    ra, rb = ranks(a), ranks(b)
    ma, mb = statistics.fmean(ra), statistics.fmean(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = sum((x - ma) ** 2 for x in ra)
    vb = sum((y - mb) ** 2 for y in rb)
    return cov / (va * vb) ** 0.5 if va > 0 and vb > 0 else None


def top_overlap(ids: list[str], a: list[float | None], b: list[float | None], keep: float = 0.5) -> float:
    from skillduet_plugin.core.scores import select_top

    ka, _ = select_top(ids, a, keep)
    kb, _ = select_top(ids, b, keep)
    return len(set(ka) & set(kb)) / len(ka)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--model", default=None,
                        help="model folder (default: RUN_DIR/model, else the latest RUN_DIR/checkpoints/checkpoint-N)")
    parser.add_argument("--interval", type=int, default=None, help="consolidation interval (default: the run's)")
    parser.add_argument("--max-heldout", type=int, default=None,
                        help="rows per candidate (default: the run's skillduet.max_heldout)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from skillduet_plugin.config import SkillDuetConfig
    from skillduet_plugin.core.logprobs import response_logprobs
    from skillduet_plugin.skills.bank import BANK_FILENAME
    from skillduet_plugin.skills.lifecycle import SkillLifecycle
    from skillduet_plugin.skills.trajectory_io import TRAJECTORY_DIRNAME, load_trajectories

    torch.set_num_threads(1)
    run = Path(args.run_dir)
    bank_path = run / BANK_FILENAME  # not the checkpoints' snapshots (banks as of their step)
    if not bank_path.exists():
        raise SystemExit(f"{run}: no {BANK_FILENAME} under the run folder")
    checkpoints = sorted((run / "checkpoints").glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1]))
    model_dir = Path(args.model) if args.model else run / "model" if (run / "model").is_dir() else checkpoints[-1]
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    trajectories = load_trajectories([str(run / TRAJECTORY_DIRNAME)])
    import yaml

    run_cfg = yaml.safe_load((run / "config.yaml").read_text()) if (run / "config.yaml").exists() else {}
    method = run_cfg.get("skillduet") or {}
    interval = args.interval or int(method.get("consolidation_interval", 3))
    args.max_heldout = args.max_heldout or int(method.get("max_heldout", 8))

    def logprob_fn(contexts, responses):
        with torch.no_grad():
            return response_logprobs(model, contexts, responses, token_budget=8192,
                                     pad_token_id=tokenizer.pad_token_id or 0)

    lifecycles = {name: SkillLifecycle(SkillDuetConfig(max_heldout=args.max_heldout, **over), bank_path,
                                       tokenizer=tokenizer, write=False, similarity=None)
                  for name, over in ESTIMATORS.items()}
    reader = lifecycles["pairwise"]
    scores: dict[str, dict[str, dict]] = {name: {} for name in ESTIMATORS}
    candidates = {}
    steps = sorted({t.step for t in trajectories})
    stats: dict[str, list] = {"teacher_plan": []}
    for step in steps:
        trajs = [t for t in trajectories if t.step == step]
        skills = reader.bank.candidates(since_step=step - 1, until_step=step)
        if not skills:
            continue
        candidates.update({s.skill_id: s for s in skills})
        for name, lc in lifecycles.items():
            for t in trajs:
                t.base_logps = None  # both terms with this model
            scores[name].update(lc.score(skills, trajs, logprob_fn))
        stats["teacher_plan"].append({"step": step, **lifecycles["teacher"].metrics()})

    rows = []
    for end in range(interval, max(steps) + 1, interval):
        window = [s for s in candidates.values() if end - interval < s.step <= end]
        if not window:
            continue
        for scope in sorted({s.scope for s in window}) + ["(all scopes)"]:
            ids = sorted(s.skill_id for s in window if scope in (s.scope, "(all scopes)"))
            row = {"consolidation_step": end, "scope": scope, "candidates": len(ids)}
            for other in ("teacher", "teacher_free"):
                a = [scores["pairwise"][i]["strength"] for i in ids]
                b = [scores[other][i]["strength"] for i in ids]
                both = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
                row[f"{other}_scored"] = sum(y is not None for y in b)
                row[f"{other}_spearman"] = spearman([x for x, _ in both], [y for _, y in both])
                row[f"{other}_top50_overlap"] = top_overlap(ids, a, b)
            row["pairwise_scored"] = sum(scores["pairwise"][i]["strength"] is not None for i in ids)
            rows.append(row)
    print(f"{'step':>4} {'scope':<28} {'n':>3} {'pw':>3} {'t':>3} {'rho(t)':>7} {'top50(t)':>8} "
          f"{'rho(free)':>9} {'top50(free)':>11}")
    fmt = lambda v: "  -" if v is None else f"{v:.2f}"  # noqa: E731
    for r in rows:
        print(f"{r['consolidation_step']:>4} {r['scope']:<28} {r['candidates']:>3} {r['pairwise_scored']:>3} "
              f"{r['teacher_scored']:>3} {fmt(r['teacher_spearman']):>7} {fmt(r['teacher_top50_overlap']):>8} "
              f"{fmt(r['teacher_free_spearman']):>9} {fmt(r['teacher_free_top50_overlap']):>11}")
    per_scope = [r for r in rows if r["scope"] != "(all scopes)"]
    rhos = [r["teacher_spearman"] for r in per_scope if r["teacher_spearman"] is not None]
    overlaps = [r["teacher_top50_overlap"] for r in per_scope]
    summary = {"run_dir": str(run), "model": str(model_dir), "interval": interval, "max_heldout": args.max_heldout,
               "rows": rows,
               "teacher_top50_overlap_mean": statistics.fmean(overlaps) if overlaps else None,
               "teacher_free_spearman_median": statistics.median(
                   [r["teacher_free_spearman"] for r in per_scope if r["teacher_free_spearman"] is not None] or [0.0]),
               "pooled_spearman": [r["teacher_spearman"] for r in rows if r["scope"] == "(all scopes)"],
               "n_candidates": len(candidates), "plans": stats["teacher_plan"],
               "rank_spearman_median": statistics.median(rhos) if rhos else None}
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2, default=str) + "\n")
    for lc in lifecycles.values():
        lc.close()
    print(json.dumps({k: v for k, v in summary.items() if k not in ("rows", "plans")}, indent=2))
    print(f"rank_spearman_median {summary['rank_spearman_median']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
