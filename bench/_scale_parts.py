"""Parts of ``bench/lifecycle_scale.py`` measured apart from the step loop: one analyzer call's latency,
consolidation of thousands of candidates, and the skill bank after hundreds of steps."""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from bench import _llm_server


def one_call_latency(url: str, latency: float, calls: int = 7) -> dict[str, float]:
    """Wall seconds of single analyzer calls made one after another (the unit the step's wall is compared to)."""
    from skillduet_plugin.llm.base import ChatRequest, make_backend
    from skillduet_plugin.llm.config import BackendConfig

    backend = make_backend(BackendConfig(kind="openai", model="bench", base_url=url, concurrency=1, max_retries=3,
                                         backoff_s=0.5, timeout_s=60.0), role="analyzer")
    walls = []
    for i in range(calls):
        start = time.perf_counter()
        backend.generate([ChatRequest([{"role": "user", "content": f"Task: probe {i}"}], {})])
        walls.append(time.perf_counter() - start)
    return {"median_s": round(statistics.median(walls), 4), "min_s": round(min(walls), 4),
            "max_s": round(max(walls), 4), "calls": calls, "server_median_latency_s": latency}


def candidates(n: int, *, scope: str = "pick_and_place", per_step: int = 128, seed: int = 0) -> list:
    """``n`` analyzer-style candidates of one scope (about 8 per task, many exact or near duplicates), with
    Strength scores, ``per_step`` to a step."""
    from skillduet_plugin.skills.types import Skill

    rng = random.Random(seed)
    games = max(1, n // 8)
    out = []
    for i in range(n):
        g = rng.randrange(games)
        text = _llm_server.skill_text(f"Task: put a thing in a place (game {g}).\nattempt {i}")
        out.append(Skill(text=text, scope=scope, kind="shared", source_traj_ids=(f"t{i}",), step=1 + i // per_step,
                         scores={"strength": rng.random()}))
    return out


def _timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, round(time.perf_counter() - wall, 4), round(time.process_time() - cpu, 4)


def consolidation_at(n: int, tokenizer: Any, config: Any, *, loop_limit: int) -> dict[str, Any]:
    """Near-duplicate detection (vectorised; the pairwise loop too when ``n <= loop_limit``, with the decisions
    compared) and a whole ``consolidate_scope`` with the synthesizer, over ``n`` candidates of one scope."""
    from skillduet_plugin.llm.base import make_backend
    from skillduet_plugin.skills.consolidate import consolidate_scope, dedupe
    from skillduet_plugin.skills.similarity import lexical_matrix
    from skillduet_plugin.skills.types import GlobalSkills

    cands = candidates(n)
    kw = dict(selector="strength", threshold=config.dedupe_threshold)
    (unique, rejected), wall, cpu = _timed(lambda: dedupe(cands, **kw))
    out: dict[str, Any] = {"candidates": n, "unique": len(unique), "rejected": len(rejected),
                           "near_duplicates": sum(r["reason"] == "near_duplicate" for r in rejected),
                           "dedupe_cpu_s": cpu, "dedupe_wall_s": wall}
    if n <= loop_limit:
        (loop_unique, loop_rejected), _, loop_cpu = _timed(lambda: dedupe(cands, **kw, similarity=lexical_matrix))
        out["loop_dedupe_cpu_s"] = loop_cpu
        out["identical_to_loop"] = ([s.skill_id for s in loop_unique] == [s.skill_id for s in unique]
                                    and loop_rejected == rejected)
    synthesizer = make_backend(config.synthesizer, role="synthesizer")
    report, wall, cpu = _timed(lambda: consolidate_scope(
        "pick_and_place", cands, GlobalSkills(scope="pick_and_place", version=None, text=""), step=10,
        selector="strength",
        keep_ratio=config.keep_ratio, dedupe_threshold=config.dedupe_threshold, seed=0,
        budget_tokens=config.skill_token_budget, synthesizer=synthesizer, tokenizer=tokenizer,
        max_chars=config.max_skill_chars))
    out.update(consolidate_wall_s=wall, consolidate_cpu_s=cpu, kept=len(report.kept), items=len(report.items),
               global_tokens=report.tokens, budget_tokens=report.budget_tokens,
               compress_rounds=report.compress_rounds, synthesizer_calls=synthesizer.calls)
    print(f"consolidation of {n}: dedupe {cpu:.2f}s CPU, whole {out['consolidate_wall_s']:.2f}s wall", flush=True)
    return out


def bank_at(steps: int, rows: int, interval: int, *, scored: int = 128) -> dict[str, Any]:
    """The bank after ``steps`` steps of ``rows`` candidates (inserted directly, ``scored`` of them scored per
    step, a consolidation every ``interval``): insert time per step, file size, query latencies."""
    from skillduet_plugin.skills.bank import SkillBank
    from skillduet_plugin.skills.types import Skill

    scopes = ("pick_and_place", "pick_clean_then_place", "pick_heat_then_place", "pick_cool_then_place",
              "look_at_obj_in_light", "pick_two_obj_and_place")
    base = [c.text for c in candidates(min(rows, 1000), seed=1)]
    insert, score = [], []
    with tempfile.TemporaryDirectory(prefix="skillduet-bench-bank-") as tmp:
        bank = SkillBank(Path(tmp) / "bank.sqlite")
        for step in range(1, steps + 1):
            batch = [Skill(text=f"{base[i % len(base)]}\n- Check {i} at step {step}.", scope=scopes[i % 6],
                           kind="shared", source_traj_ids=(f"{step}-{i}-0", f"{step}-{i}-1"), step=step,
                           metadata={"task_id": f"game-{i}"}) for i in range(rows)]
            _, wall, _ = _timed(lambda: bank.add_candidates(batch, step))
            insert.append(wall)
            records = {s.skill_id: {"strength": 0.1, "utility": 0.2, "contrast": 0.3, "n_heldout": 8}
                       for s in batch[:scored]}
            _, wall, _ = _timed(lambda: bank.record_scores(records, step=step))
            score.append(wall)
            if step % interval == 0:
                bank.commit_consolidation(step, [{"scope": sc, "items": ["a", "b"], "text": "- a\n- b",
                                                  "selector": "strength", "report": {}} for sc in scopes])
        last = (steps // interval) * interval
        queries = {
            "candidates_since_last_consolidation": lambda: bank.candidates(scope=scopes[0], since_step=last - interval,
                                                                           until_step=last),
            "candidate_scopes": lambda: bank.candidate_scopes(since_step=last - interval, until_step=last),
            "last_consolidation_step": lambda: bank.last_consolidation_step(steps),
            "current_global": lambda: bank.current_global(scopes[0]),
            "all_candidates_of_scope": lambda: bank.candidates(scope=scopes[0]),
        }
        latency = {name: round(statistics.median(_timed(fn)[1] for _ in range(5)), 5) for name, fn in queries.items()}
        bank.close()
        size = sum(p.stat().st_size for p in Path(tmp).iterdir())
    return {"steps": steps, "rows": steps * rows, "file_mb": round(size / 2 ** 20, 1),
            "insert_s_per_step_median": round(statistics.median(insert), 4),
            "insert_s_per_step_last10": round(statistics.median(insert[-10:]), 4),
            "record_scores_s_per_step_median": round(statistics.median(score), 4),
            "record_scores_s_last10": round(statistics.median(score[-10:]), 4), "query_s": latency}
