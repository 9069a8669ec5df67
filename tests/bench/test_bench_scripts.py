"""The benchmark scripts: shared timing helpers, and each script's ``--smoke`` mode end to end (it must print
its headline as ``<name> <value>`` on the last line and pass its own correctness checks)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import _common  # noqa: E402


def test_interleaved_runs_configurations_alternately_after_warmup():
    calls = []
    timings = _common.interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
                                  repeats=3, warmup=1, setup={"b": lambda: calls.append("setup-b")})
    assert calls == ["a", "setup-b", "b"] * 4
    assert timings.order == ["a", "b"] * 3  # the warm-up round is not recorded
    assert len(timings.samples["a"]) == len(timings.samples["b"]) == 3


def test_trainer_steps_alternate_in_rotating_order_after_warmup():
    from bench import _trainers

    calls = []

    class Fake:
        def __init__(self, name):
            self.name = name

        def step(self):
            calls.append(self.name)
            return {"total": float(len(calls))}

    rounds = _trainers.alternate({n: Fake(n) for n in "abc"}, warmup=1, repeats=3)
    assert calls == list("abc" + "bca" + "cab" + "abc")  # no configuration is always first
    assert {n: len(r) for n, r in rounds.items()} == {"a": 3, "b": 3, "c": 3}  # warm-up round not recorded
    assert rounds["a"][0] == {"total": 6.0}  # a ran last in the first timed round


def test_ratio_is_of_medians():
    t = _common.Timings(samples={"a": [1.0, 9.0, 3.0], "b": [2.0, 1.0, 1.0]})
    assert t.median("a") == 3.0 and t.median("b") == 1.0
    assert t.ratio("a", "b") == 3.0
    assert t.summary()["a"] == {"median_s": 3.0, "min_s": 1.0, "max_s": 9.0, "repeats": 3}
    with pytest.raises(ValueError, match="repeats"):
        _common.interleaved({"a": lambda: None}, repeats=0)


def test_peak_rss_reset_and_growth():
    if not _common.reset_peak_rss():
        pytest.skip("this kernel does not allow resetting the peak RSS counter")
    base = _common.peak_rss_bytes()
    block = bytearray(64 * 2**20)
    block[:: 4096] = b"x" * len(block[:: 4096])  # touch every page so it is resident
    assert _common.peak_rss_bytes() >= base + 60 * 2**20
    del block


def _run(script: str, *extra: str, timeout: int = 600) -> tuple[str, dict]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    out_json = Path(os.environ.get("TMPDIR", "/tmp")) / f"skillduet-bench-{script}-{os.getpid()}.json"
    proc = subprocess.run([sys.executable, str(REPO / "bench" / f"{script}.py"), "--smoke", "--warmup", "0",
                           "--json", str(out_json), *extra], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    data = json.loads(out_json.read_text())
    out_json.unlink()
    return last, data


def _headline(last: str, name: str) -> float:
    match = re.fullmatch(rf"{name} (\S+)", last)
    assert match, f"last line {last!r} is not '{name} <value>'"
    return float(match.group(1))


@pytest.mark.slow
def test_strength_scoring_smoke_scores_match_the_naive_loop():
    pytest.importorskip("trl")
    last, data = _run("strength_scoring")
    value = _headline(last, "scoring_share")
    assert value > 0 and value == pytest.approx(data["scoring_share"], rel=5e-3)
    assert data["strength_scoring_speedup"] > 0 and data["per_step"]["pairwise_scoring_share"] > 0
    assert data["scores_identical_1e-5"] is True and data["max_abs_strength_diff"] <= 1e-5
    assert data["workload"]["pairs"] == data["workload"]["k"] * data["workload"]["n"]


def test_env_throughput_smoke_plays_both_envs_without_errors():
    last, data = _run("env_throughput")
    assert _headline(last, "env_pool_speedup_2w") > 0
    for env in ("alfworld", "webshop"):
        for w in ("0w", "1w", "2w"):
            assert data[env][w]["errors"] == 0, (env, w)
            assert data[env][w]["steps_per_round"] > 0
    # same seeds, deterministic envs: every pool size plays the same number of steps
    assert len({data["alfworld"][w]["steps_per_round"] for w in ("0w", "1w", "2w")}) == 1


@pytest.mark.slow
def test_step_overhead_smoke_breaks_the_step_down():
    pytest.importorskip("trl")
    last, data = _run("step_overhead")
    ratio = _headline(last, "step_overhead")
    assert ratio == pytest.approx(data["step_overhead"], rel=5e-3)
    sd, grpo = data["breakdown_median_s"]["skillduet"], data["breakdown_median_s"]["grpo"]
    assert sd["teacher_s"] > 0 and sd["scoring_s"] > 0 and sd["rollout_s"] > 0
    assert grpo["teacher_s"] == 0 and grpo["scoring_s"] == 0 and grpo["extraction_s"] == 0  # plain GRPO
    assert data["breakdown_median_s"]["local_only"]["scoring_s"] == 0


@pytest.mark.slow
def test_step_overhead_smoke_both_regimes_put_the_seeded_global_in_every_prompt():
    pytest.importorskip("trl")
    last, data = _run("step_overhead", "--regime", "both", "--no-local-only", "--global-tokens", "256")
    none, glob = data["regimes"]["none"], data["regimes"]["global"]
    assert _headline(last, "step_overhead") == pytest.approx(none["step_overhead"], rel=5e-3)
    assert data["step_overhead_global"] == glob["step_overhead"] > 0
    seeded = glob["seeded_global"]
    assert seeded["skill_token_budget"] == 256 and 208 < seeded["tokens"] <= 256
    # same tasks, same seed: the first prompts differ by the Global (plus its header) in the global regime only
    tokens = {r: {c: v["first_prompt_tokens_mean"] for c, v in data["regimes"][r]["tokens"].items()}
              for r in ("none", "global")}
    assert tokens["none"]["skillduet"] == tokens["none"]["grpo"] == tokens["global"]["grpo"]
    assert seeded["tokens"] < tokens["global"]["skillduet"] - tokens["global"]["grpo"] <= seeded["tokens"] + 16


@pytest.mark.slow
def test_memory_smoke_reports_a_peak_per_method():
    pytest.importorskip("trl")
    last, data = _run("memory")
    assert _headline(last, "memory_peak_ratio") > 0
    for method in ("skillduet", "grpo"):
        m = data["median_mb"][method]
        assert m["peak_mb"] >= m["rss_before_mb"] > 50


def test_update_memory_smoke_trains_the_same_steps_whole_and_sliced():
    pytest.importorskip("trl")
    last, data = _run("update_memory", "examples/cpu_demo.yaml", "--set", "warm_start.enabled=false", "--set",
                      "tasks_per_step=2", "--set", "num_generations=4", "--set", "max_total_tokens=512",
                      "--steps", "2", "--micro-batch", "4", "--threads", "1")
    assert _headline(last, "update_memory_ratio") > 0
    assert all(p > 50 for p in data["median_peak_mb"].values())
    whole, sliced = data["steps_first_repeat"]["whole"], data["steps_first_repeat"]["sliced"]
    assert [s["step"] for s in whole] == [s["step"] for s in sliced] == [1, 2]
    for a, b in zip(whole, sliced):  # one optimizer step either way: the same step 2 (its rollouts, its loss)
        for key in ("loss", "reward", "opd/loss"):
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), (a["step"], key)


def test_rank_agreement_statistics_by_hand():
    from bench import rank_agreement as ra

    assert ra.ranks([3.0, 1.0, 3.0, 2.0]) == [3.5, 1.0, 3.5, 2.0]  # ties share the mean rank
    assert ra.spearman([1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0]) == pytest.approx(1.0)
    assert ra.spearman([1.0, 2.0, 3.0, 4.0], [4.0, 3.0, 2.0, 1.0]) == pytest.approx(-1.0)
    # one swap of adjacent ranks in 4: rho = 1 - 6 * 2 / (4 * 15) = 0.8 (a wrong formula gives 1.0 or -1.0)
    assert ra.spearman([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 4.0, 3.0]) == pytest.approx(0.8)
    assert ra.spearman([1.0, 2.0], [1.0, 2.0]) is None  # fewer than 3 pairs
    ids = ["a", "b", "c", "d"]
    assert ra.top_overlap(ids, [4.0, 3.0, 2.0, 1.0], [4.0, 1.0, 3.0, 2.0]) == 0.5  # keep {a,b} vs {a,c}
    assert ra.top_overlap(ids, [4.0, 3.0, 2.0, 1.0], [None, None, 2.0, 1.0]) == 0.0  # unscored rank last


def test_webshop_decisions_kinds_by_hand_and_a_probe_end_to_end(tmp_path):
    """bench/webshop_decisions.py: each shopper action is put in the right decision kind, and the probe plays
    the shopper's episodes (teacher forced) with an untrained tiny WebShop build: every shopper turn is one
    decision, the shopper buys on every goal it wins, and the untrained model agrees with it only sometimes."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from bench.webshop_decisions import decision_kind, probe
    from skillduet_plugin.core.conversation import ChatTokenizer
    from skillduet_plugin.envs.webshop import make_webshop
    from skillduet_plugin.warmstart.tiny_model import build_tiny

    index = ["search[red shoes]", "search[shoes]"]
    results = ["click[back to search]", "click[next >]", "click[item 1]", "click[item 2]"]
    item = ["click[back to search]", "click[< prev]", "click[features]", "click[red]", "click[buy now]"]
    assert decision_kind(index, "search[shoes]") == "search"
    assert decision_kind(results, "click[item 2]") == "row"
    assert decision_kind(results, "click[next >]") == "results:other"
    assert decision_kind(item, "click[red]") == "option"
    assert decision_kind(item, "click[buy now]") == "buy"
    assert decision_kind(item, "click[< prev]") == "item:other"

    folder = build_tiny(tmp_path / "shop", corpus="webshop")
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    chat = ChatTokenizer(AutoTokenizer.from_pretrained(folder))
    env = make_webshop(split="test", search_choices=8, result_labels=True)
    tasks = list(env.tasks)[:3]
    out = probe(model, chat, env, tasks, "webshop", max_turns=8, max_total_tokens=4096, max_new_tokens=32)
    counts = {k: tuple(int(x) for x in v.split("/")) for k, v in out["decisions"].items()}
    assert counts["search"][1] == 3 and counts["buy"][1] >= 2  # one search per goal; the shopper buys
    assert all(a <= b for a, b in counts.values())
    assert sum(a for a, _ in counts.values()) < sum(b for _, b in counts.values())  # untrained: not all right
    assert out["greedy_play"]["goals"] == 3 and 0 <= out["greedy_play"]["mean_score"] <= 1


def test_loopback_llm_server_answers_by_kind_bounds_requests_and_stops_itself():
    import time
    import urllib.error
    import urllib.request

    from bench import _llm_server

    proc, url = _llm_server.start(latency=0.0, fail=0.0, max_requests=2, idle_s=1.0)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def post(content: str) -> tuple[int, str]:
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": content}]}).encode()
        req = urllib.request.Request(url + "/chat/completions", data=body, headers={"Content-Type": "application/json"})
        try:
            with opener.open(req, timeout=10) as response:
                return response.status, json.loads(response.read())["choices"][0]["message"]["content"]
        except urllib.error.HTTPError as exc:
            return exc.code, ""

    try:
        status, skill = post("Task: put a mug in the cabinet.\n## Successful attempt\n...")
        assert status == 200 and skill.startswith("<skill>\n- ")
        status, merged = post("## Current skill set\n- a\n\n## New skills\n### Skill 1\n- b\n- c")
        assert status == 200 and merged == "<global>\n- a\n- b\n</global>"
        assert post("Task: one more")[0] == 503  # the request bound
        assert _llm_server.stats(url)["refused"] == 1
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert proc.poll() == 0  # idle for idle_s: it stopped by itself
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.slow
def test_lifecycle_scale_smoke_reports_every_part():
    last, data = _run("lifecycle_scale")
    value = _headline(last, "analyzer_wall_over_one_call")
    assert value > 0 and value == pytest.approx(data["analyzer_wall_over_one_call"], rel=5e-3)
    steps = data["per_step"]
    assert len(data["steps"]) == data["workload"]["steps"] and steps["requests"] > 0 and steps["skills"] > 0
    assert steps["max_inflight"] > 1 and steps["scoring_rows"] > 0 and steps["consolidation_cpu_s"]
    assert steps["analyzer_in_tokens_mean"] > steps["analyzer_out_tokens_mean"] > 0
    assert 0 < steps["global_tokens_max"] <= steps["global_budget"]
    assert data["near_duplicate_decisions_identical"] is True
    assert all(d["identical_to_loop"] and d["near_duplicates"] > 0 for d in data["consolidation_scale"])
    assert data["bank"]["rows"] == data["workload"]["bank_steps"] * data["workload"]["bank_rows"]
    assert data["peak_rss_mb"] > 0


@pytest.mark.slow
def test_opd_estimators_smoke_times_every_estimator_beside_grpo():
    pytest.importorskip("trl")
    last, data = _run("opd_estimators")
    ratio = _headline(last, "opd_estimators")
    assert ratio == pytest.approx(data["ratio_to_sampled"]["choices"], rel=5e-3)
    assert set(data["breakdown_median_s"]) == {"grpo", "sampled", "choices", "topk"}
    assert data["ratio_to_sampled"]["sampled"] == 1.0
    assert data["breakdown_median_s"]["grpo"]["teacher_s"] == 0 < data["breakdown_median_s"]["choices"]["teacher_s"]
