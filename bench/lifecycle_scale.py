"""Benchmark: the driver-side skill lifecycle at paper scale (128 groups x 8 rollouts a step, ALFWorld length).

Per step, on synthetic trajectories of realistic shape (``bench._synthetic``: real prompts, tokenised like the
rollout collector; per-group success rates between 0.2 and 0.8, so most groups are mixed), the steps the trainer
runs between rollout and update: analyzer calls (``SkillLifecycle.analyze``) against a loopback
OpenAI-compatible server that answers after ~``--latency`` s with spread and ~2 % failures
(``bench._llm_server``), storing candidates, building every assigned trajectory's teacher prompt, Strength
scoring (``heldout="teacher"``; the log-prob forward is a stub, its time excluded: on a trainer it is GPU work)
and, every ``--interval`` steps, consolidation with the synthesizer on the same server.

Then, separately: near-duplicate detection and consolidation at ~1,300 and ~10,000 candidates in one scope (the
vectorised lexical path against the pairwise loop where the loop is affordable, with identical decisions), and
the SQLite bank after ``--bank-steps`` simulated steps of ``--bank-rows`` candidates each (inserted directly).
CPU figures are this process's CPU time (the server is a separate process); wall figures include waiting.
Headline: ``analyzer_wall_over_one_call`` = median over steps of (wall seconds of the step's analyzer calls /
median wall seconds of one call alone).
"""

from __future__ import annotations

import dataclasses
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import _common  # noqa: E402
from bench import _llm_server  # noqa: E402
from bench import _scale_parts  # noqa: E402
from bench import _synthetic  # noqa: E402

SCOPES = ("pick_and_place", "pick_clean_then_place", "pick_heat_then_place", "pick_cool_then_place",
          "look_at_obj_in_light", "pick_two_obj_and_place")


def sizes(args) -> dict:
    """The workload of this run: the full form, ``--quick`` or ``--smoke``, overridable one by one."""
    if args.smoke:
        base = dict(groups=4, group=4, turns=2, steps=2, interval=1, latency=0.05, pool=8, dedupe=[60, 200],
                    bank_steps=3, bank_rows=50)
    elif args.quick:
        base = dict(groups=128, group=8, turns=6, steps=4, interval=2, latency=2.0, pool=64, dedupe=[1300, 10000],
                    bank_steps=20, bank_rows=1000)
    else:
        base = dict(groups=128, group=8, turns=12, steps=20, interval=10, latency=2.0, pool=256,
                    dedupe=[1300, 10000], bank_steps=200, bank_rows=1000)
    for key in base:
        value = getattr(args, key.replace("-", "_"), None)
        if value is not None:
            base[key] = value
    return base


class StepMaker:
    """One step's trajectories: groups of ``group`` rollouts of one task, drawn from a tokenised pool."""

    def __init__(self, tokenizer, w: dict, seed: int = 0) -> None:
        import torch

        self.pool = _synthetic.make_trajectories(tokenizer, w["pool"], turns=w["turns"], think_words=20, seed=seed)
        gen = torch.Generator().manual_seed(seed)
        self.teacher = {}
        for t in self.pool:  # the trainer's old and teacher log-probs: any numbers of the right length will do
            n = len(t.completion_ids)
            t.base_logps = (-torch.rand(n, generator=gen)).tolist()
            self.teacher[t.traj_id] = -torch.rand(n, generator=gen)
        self.rng = random.Random(seed)
        self.rates = [self.rng.uniform(0.2, 0.8) for _ in range(w["groups"])]
        self.w = w

    def step(self, step: int) -> tuple[list, dict]:
        trajs, teacher = [], {}
        w = self.w
        for g in range(w["groups"]):
            wins = [self.rng.random() < self.rates[g] for _ in range(w["group"])]
            mean = sum(wins) / len(wins)
            std = statistics.pstdev([float(x) for x in wins]) or 1.0
            for k, won in enumerate(wins):
                src = self.pool[(g * w["group"] + k) % len(self.pool)]
                t = dataclasses.replace(src, traj_id=f"{step}-{g}-{k}", task_id=f"game-{g}", scope=SCOPES[g % 6],
                                        task=f"put a {_synthetic._OBJECTS[g % 12]} in {_synthetic._PLACES[g % 10]}"
                                             f" (game {g}).", step=step, success=won, reward=float(won),
                                        advantage=(float(won) - mean) / std, local_skill_id=None,
                                        metadata={"env": "alfworld"})
                trajs.append(t)
                teacher[t.traj_id] = self.teacher[src.traj_id]
        return trajs, teacher


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _since(start: tuple[float, float]) -> tuple[float, float]:
    wall, cpu = _clock()
    return round(wall - start[0], 4), round(cpu - start[1], 4)


def _exchange_tokens(requests, answers, tokenizer) -> dict:
    """Mean analyzer input (all messages) and output tokens of a step's requests."""
    from skillduet_plugin.skills.budget import count_tokens

    ins = [sum(count_tokens(m["content"], tokenizer) for m in r.messages) for r in requests]
    outs = [count_tokens(a, tokenizer) for a in answers if a]
    return {"analyzer_in_tokens_mean": statistics.mean(ins) if ins else 0.0,
            "analyzer_out_tokens_mean": statistics.mean(outs) if outs else 0.0}


def run_steps(lifecycle, maker: StepMaker, w: dict, url: str) -> list[dict]:
    """The lifecycle's per-step work for ``w["steps"]`` steps; one record of timings and sizes per step."""
    import torch

    stub = {"rows": 0, "tokens": 0, "cpu": 0.0}

    def logprob_fn(contexts, responses):  # the scoring forward: GPU work on a trainer, excluded from the CPU
        t0 = time.process_time()
        stub["rows"] += len(contexts)
        stub["tokens"] += sum(len(c) + len(r) for c, r in zip(contexts, responses))
        out = [torch.full((len(r),), -0.5) for r in responses]
        stub["cpu"] += time.process_time() - t0
        return out

    calls = {"wall": 0.0}
    generate = lifecycle.analyzer.generate

    def timed_generate(requests):  # the HTTP part of analyze(): the rest is rendering the trajectories
        start = time.perf_counter()
        answers = None
        try:
            answers = generate(requests)
            return answers
        finally:
            calls["wall"] += time.perf_counter() - start
            calls["exchanges"] = (requests, answers or [])  # sized after the step's timings, not within them

    lifecycle.analyzer.generate = timed_generate
    chat = lifecycle.chat_tokenizer()
    records = []
    for step in range(1, w["steps"] + 1):
        trajs, teacher = maker.step(step)
        rec: dict = {"step": step, "trajectories": len(trajs)}
        _llm_server.stats(url, reset=True)
        retries0, failures0 = lifecycle.analyzer.retries, lifecycle.analyzer.failures
        t = _clock()
        calls["wall"] = 0.0
        result, stats = lifecycle.analyze(trajs, step)
        rec["analyze_wall_s"], rec["analyze_cpu_s"] = _since(t)
        rec["calls_wall_s"] = round(calls["wall"], 4)
        rec.update(_exchange_tokens(*calls.pop("exchanges", ([], [])), lifecycle.tokenizer))
        rec.update(requests=stats.requests, max_inflight=_llm_server.stats(url)["max_inflight"],
                   retries=lifecycle.analyzer.retries - retries0, failures=lifecycle.analyzer.failures - failures0)
        t = _clock()
        lifecycle.record_extraction(result, stats, step)
        rec["record_cpu_s"] = _since(t)[1]
        by_id = {s.skill_id: s for s in result.skills}
        t = _clock()
        local_tokens = []
        for traj in trajs:  # the teacher prompt of every assigned trajectory (OPD's teacher forward input)
            sid = result.assignment.get(traj.traj_id)
            if sid is None:
                continue
            traj.local_skill_id = sid
            ids = chat.prompt_ids(lifecycle.teacher_messages(traj.prompt_messages, task=traj.task, scope=traj.scope,
                                                             local_skill=by_id[sid]))
            local_tokens.append(len(ids))
        rec["teacher_prompts_cpu_s"] = _since(t)[1]
        student = [len(chat.prompt_ids(lifecycle.student_messages(x.prompt_messages, task=x.task, scope=x.scope)))
                   for x in trajs[:: max(1, len(trajs) // 32)]]
        rec["student_prompt_tokens_mean"] = statistics.mean(student)
        rec["teacher_prompt_tokens_mean"] = statistics.mean(local_tokens) if local_tokens else 0.0
        rec["completion_tokens_mean"] = statistics.mean(len(x.completion_ids) for x in trajs)
        rec["policy_tokens_mean"] = statistics.mean(sum(x.completion_mask) for x in trajs)
        stub.update(rows=0, tokens=0, cpu=0.0)
        t = _clock()
        lifecycle.score(result.skills, trajs, logprob_fn, teacher_logps=teacher, assignment=result.assignment)
        wall, cpu = _since(t)
        rec.update(score_cpu_s=round(cpu - stub["cpu"], 4), scoring_rows=stub["rows"],
                   scoring_tokens=stub["tokens"], skills=len(result.skills),
                   assigned=len(result.assignment))
        t = _clock()
        reports = lifecycle.end_step(step)
        rec["end_step_wall_s"], rec["end_step_cpu_s"] = _since(t)
        if reports:
            rec["consolidation"] = [{"scope": r.scope, "candidates": r.n_candidates, "kept": len(r.kept),
                                     "rejected": len(r.rejected), "items": len(r.items), "tokens": r.tokens,
                                     "budget": r.budget_tokens, "version": r.version,
                                     "compress_rounds": r.compress_rounds} for r in reports]
        records.append(rec)
        print(f"step {step}: analyze {rec['analyze_wall_s']:.2f}s wall, calls {rec['calls_wall_s']:.2f}s "
              f"({rec['requests']} requests, "
              f"{rec['max_inflight']} in flight), score {rec['score_cpu_s']:.2f}s CPU, "
              f"end_step {rec['end_step_wall_s']:.2f}s", flush=True)
    return records


def summarise(records: list[dict], latency_median: float) -> dict:
    def med(key: str) -> float:
        return round(statistics.median(r[key] for r in records), 4)

    ratios = [r["calls_wall_s"] / latency_median for r in records]
    cons = [c for r in records for c in r.get("consolidation", [])]
    return {"analyze_wall_s": med("analyze_wall_s"), "analyze_cpu_s": med("analyze_cpu_s"),
            "calls_wall_s": med("calls_wall_s"),
            "requests": med("requests"), "max_inflight": max(r["max_inflight"] for r in records),
            "analyzer_wall_over_one_call": round(statistics.median(ratios), 3),
            "analyzer_wall_over_one_call_max": round(max(ratios), 3),
            "record_cpu_s": med("record_cpu_s"), "teacher_prompts_cpu_s": med("teacher_prompts_cpu_s"),
            "score_cpu_s": med("score_cpu_s"), "scoring_rows": med("scoring_rows"),
            "scoring_tokens": med("scoring_tokens"), "skills": med("skills"), "assigned": med("assigned"),
            "student_prompt_tokens_mean": med("student_prompt_tokens_mean"),
            "teacher_prompt_tokens_mean": med("teacher_prompt_tokens_mean"),
            "completion_tokens_mean": med("completion_tokens_mean"), "policy_tokens_mean": med("policy_tokens_mean"),
            "analyzer_in_tokens_mean": med("analyzer_in_tokens_mean"),
            "analyzer_out_tokens_mean": med("analyzer_out_tokens_mean"),
            "consolidation_wall_s": [r["end_step_wall_s"] for r in records if r.get("consolidation")],
            "consolidation_cpu_s": [r["end_step_cpu_s"] for r in records if r.get("consolidation")],
            "consolidation_candidates": [sum(c["candidates"] for c in r["consolidation"])
                                         for r in records if r.get("consolidation")],
            "global_tokens_max": max((c["tokens"] for c in cons), default=0),
            "global_budget": cons[0]["budget"] if cons else None,
            "global_versions": [(c["scope"], c["version"], c["tokens"]) for c in cons]}


def main(argv: list[str] | None = None) -> int:
    parser = _common.base_parser(__doc__.splitlines()[0])
    for key in ("groups", "group", "turns", "steps", "interval", "pool", "bank-steps", "bank-rows"):
        parser.add_argument(f"--{key}", type=int, default=None)
    parser.add_argument("--latency", type=float, default=None, help="median analyzer latency, s (default 2)")
    parser.add_argument("--dedupe", type=int, nargs="*", default=None, help="candidate counts to consolidate")
    parser.add_argument("--concurrency", type=int, default=64, help="analyzer requests in flight (default 64)")
    parser.add_argument("--loop-limit", type=int, default=2000,
                        help="also time the pairwise near-duplicate loop up to this many candidates")
    args = parser.parse_args(argv)
    _common.apply_threads(args)
    w = sizes(args)
    load_before = _common.machine_conditions().get("load_avg")
    _common.reset_peak_rss()
    from transformers import AutoTokenizer

    from skillduet_plugin.config import SkillDuetConfig
    from skillduet_plugin.llm.config import BackendConfig
    from skillduet_plugin.skills.lifecycle import SkillLifecycle

    tokenizer = AutoTokenizer.from_pretrained(_synthetic.tiny_model_dir())
    proc, url = _llm_server.start(latency=w["latency"], idle_s=1800)
    try:
        one_call = _scale_parts.one_call_latency(url, w["latency"])
        backend = dict(kind="openai", model="bench", base_url=url, timeout_s=60.0, max_retries=3, backoff_s=0.5)
        config = SkillDuetConfig(consolidation_interval=w["interval"],
                                 analyzer=BackendConfig(**backend, concurrency=args.concurrency),
                                 synthesizer=BackendConfig(**backend, concurrency=8))
        maker = StepMaker(tokenizer, w)
        with tempfile.TemporaryDirectory(prefix="skillduet-bench-scale-") as tmp:
            lifecycle = SkillLifecycle(config, Path(tmp) / "bank.sqlite", tokenizer=tokenizer, similarity=None,
                                       env="alfworld")
            records = run_steps(lifecycle, maker, w, url)
            lifecycle.close()
        steps = summarise(records, one_call["median_s"])
        dedupe = [_scale_parts.consolidation_at(n, tokenizer, config, loop_limit=args.loop_limit)
                  for n in w["dedupe"]]
        server = _llm_server.stats(url)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    bank = _scale_parts.bank_at(w["bank_steps"], w["bank_rows"], w["interval"])
    identical = all(d.get("identical_to_loop", True) for d in dedupe)
    summary = {"load_avg_before": load_before, "workload": w, "one_call": one_call, "per_step": steps,
               "steps": records, "consolidation_scale": dedupe, "bank": bank, "server": server,
               "peak_rss_mb": round(_common.peak_rss_bytes() / 2 ** 20, 1),
               "near_duplicate_decisions_identical": identical}
    _common.report("analyzer_wall_over_one_call", steps["analyzer_wall_over_one_call"], summary, args)
    return 0 if identical else 1


if __name__ == "__main__":
    raise SystemExit(main())
