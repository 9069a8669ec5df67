"""What a small local analyzer writes, and what the reply judge lets through: SmolLM2-135M-Instruct through a real
``vllm serve`` on loopback and through the in-process transformers backend, each with and without the constrained
reply form (``reply_form=regex``: vLLM's structured outputs; xgrammar's logits processor), on the same analyzer
requests (``bench/_analyzer_jobs.py``: generated ALFWorld games, a successful expert attempt and a failed random
one, pair / procedure / correction prompts cycled), with the offline analyzer as reference.

Per configuration and per ``--replies`` replies: replies in the ``<skill>`` form (parsed), accepted, rejected by
the judge's reason, accepted skills that name the game's target receptacle or an action the successful attempt
took, accepted skills holding a line of the prompt's structure or a copied sentence (0 by construction: the
check of the Done-when on a real run), seconds per reply and per reply token, measured one configuration after
the other in one run (the load average is recorded beside them).

    python bench/analyzer_quality.py --json docs/results/analyzer_quality.json
    python bench/analyzer_quality.py --replies 10 --backends transformers      # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import _common  # noqa: E402,F401  (offline environment variables, kernel pinning)
from bench._analyzer_jobs import AnalyzerCase, build_cases, names_game  # noqa: E402

BACKENDS = ("offline", "vllm", "transformers")
FORMS = ("free", "regex")


def _smollm2(cache: Path) -> Path:
    from skillduet_plugin.llm.gguf import convert_gguf, find_package_gguf

    folder = cache / "smollm2"
    if not (folder / "config.json").is_file():
        convert_gguf(find_package_gguf(), folder)
    return folder


def _games(cache: Path) -> Path:
    from skillduet_plugin.envs.alfworld.generator import generate_games

    root = cache / "games"
    if not (root / "json_2.1.1" / "train").is_dir():
        generate_games(root, "train", n_per_type=3, seed=1, max_walkthrough=8)
    return root


def judge_replies(cases: list[AnalyzerCase], replies: list[str | None], *, copies: bool) -> dict[str, Any]:
    """The judge's verdicts on ``replies`` (one per case), summed: parsed, accepted, by reason, naming the game."""
    from skillduet_plugin.skills.judge import (COPIED_RATIO, PromptView, copied_ratio, judge_skill_reply,
                                               line_structure, skill_region)

    reasons: Counter = Counter()
    parsed = accepted = naming = leaks = 0
    samples: list[dict[str, str]] = []
    for case, reply in zip(cases, replies):
        if reply is not None and skill_region(reply)[0].strip() and "<skill>" in reply.lower():
            parsed += 1
        verdict = judge_skill_reply(reply, case.job.request.messages, task=case.job.task, copies=copies)
        if verdict.text is None:
            reasons[str(verdict.reason)] += 1
            continue
        accepted += 1
        naming += names_game(verdict.text, case)
        view = PromptView.of(case.job.request.messages, case.job.task)
        leaks += any(line_structure(ln) or (copies and copied_ratio(ln, view) >= COPIED_RATIO)
                     for ln in verdict.text.splitlines())
        if len(samples) < 6:
            samples.append({"kind": case.job.kind, "task": case.job.task, "skill": verdict.text})
    return {"replies": len(replies), "parsed": parsed, "accepted": accepted, "rejected": dict(reasons.most_common()),
            "names_target_or_action": naming, "accepted_with_structure_or_copy": leaks, "accepted_samples": samples}


def _backend(kind: str, form: str, args: argparse.Namespace, model_dir: Path, server: Any = None):
    from skillduet_plugin.config import BackendConfig
    from skillduet_plugin.llm import make_backend

    if kind == "offline":
        return make_backend(BackendConfig(kind="offline"))
    common = dict(temperature=0.0, max_tokens=args.reply_tokens, concurrency=args.concurrency, reply_form=form)
    if kind == "vllm":
        return make_backend(BackendConfig(kind="openai", model="smollm2", base_url=server.base_url, timeout_s=1800,
                                          **common))
    return make_backend(BackendConfig(kind="transformers", model=str(model_dir), **common))


def run_config(name: str, backend: Any, cases: list[AnalyzerCase], tokenizer: Any = None) -> dict[str, Any]:
    """One configuration's replies to ``cases``, timed, judged and counted (tokens with SmolLM2's tokenizer,
    words without one)."""
    t0 = time.perf_counter()
    replies = backend.generate([c.job.request for c in cases])
    seconds = time.perf_counter() - t0
    tokens = sum(len(tokenizer(r, add_special_tokens=False)["input_ids"]) if tokenizer else len(r.split())
                 for r in replies if r)
    out = judge_replies(cases, replies, copies=bool(getattr(backend, "may_copy_prompt", True)))
    out.update({"config": name, "seconds": round(seconds, 1), "s_per_reply": round(seconds / len(cases), 3),
                "reply_tokens": tokens, "ms_per_token": round(1000 * seconds / max(1, tokens), 1),
                "failures": int(backend.failures), "constrained": int(getattr(backend, "constrained", 0)),
                "form_refusals": int(getattr(backend, "form_refusals", 0)), "load1": round(os.getloadavg()[0], 2),
                "raw_replies": replies})
    print(f"{name}: {out['accepted']}/{len(cases)} accepted, parsed {out['parsed']}, rejected {out['rejected']}, "
          f"naming {out['names_target_or_action']}, {out['s_per_reply']} s/reply, {out['ms_per_token']} ms/token, "
          f"load {out['load1']}", flush=True)
    return out


def rejudge(args: argparse.Namespace) -> None:
    """The verdicts of a recorded run recomputed with the judge as it is now (the timings stay as measured)."""
    summary = json.loads(Path(args.rejudge).read_text())
    cases = build_cases(_games(Path(args.cache)), summary["replies"], render_tokens=summary["render_tokens"])
    for result in summary["configs"]:
        copies = result["config"] != "offline"
        result.update(judge_replies(cases, result["raw_replies"], copies=copies))
        print(f"{result['config']}: {result['accepted']}/{len(cases)} accepted, rejected {result['rejected']}, "
              f"naming {result['names_target_or_action']}")
    Path(args.json or args.rejudge).write_text(json.dumps(summary, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replies", type=int, default=50)
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--forms", default=",".join(FORMS))
    parser.add_argument("--reply-tokens", type=int, default=128, help="reply budget per request (tokens)")
    parser.add_argument("--render-tokens", type=int, default=1200, help="transcript budget per attempt (tokens)")
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight / generation batch")
    parser.add_argument("--cache", default=os.environ.get("SKILLDUET_CACHE", str(Path.home() / ".cache/skillduet"))
                        + "/analyzer_quality")
    parser.add_argument("--json", default=None, help="write the results (with every raw reply) to this file")
    parser.add_argument("--rejudge", default=None, metavar="JSON",
                        help="judge the raw replies recorded in JSON again (same requests; no generation)")
    args = parser.parse_args()
    if args.rejudge:
        return rejudge(args)
    import torch
    from transformers import AutoTokenizer

    torch.set_num_threads(1)
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    backends, forms = args.backends.split(","), args.forms.split(",")
    model_dir = _smollm2(cache) if set(backends) - {"offline"} else cache / "smollm2"
    cases = build_cases(_games(cache), args.replies, render_tokens=args.render_tokens)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir)) if model_dir.is_dir() else None
    results: list[dict[str, Any]] = []
    t0 = time.time()

    def record(result: dict[str, Any]) -> None:  # written after every configuration: a long run keeps its part
        results.append(result)
        if args.json:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps(
                {"replies": len(cases), "reply_tokens": args.reply_tokens, "render_tokens": args.render_tokens,
                 "kinds": dict(Counter(c.job.request.payload["kind"] for c in cases)),
                 "seconds": round(time.time() - t0), "machine": _common.machine_conditions(), "configs": results},
                indent=1) + "\n")

    if "offline" in backends:
        record(run_config("offline", _backend("offline", "free", args, model_dir), cases, tokenizer))
    if "vllm" in backends:
        from skillduet_testing.vllm_server import VLLMServer

        with VLLMServer(model_dir, cache / "server.log", served_name="smollm2", max_model_len=4096,
                        max_num_seqs=args.concurrency) as server:
            print(f"vllm serve ready after {server.startup_s:.0f} s", flush=True)
            for form in forms:
                record(run_config(f"vllm/{form}", _backend("vllm", form, args, model_dir, server), cases, tokenizer))
    if "transformers" in backends:
        for form in forms:
            backend = _backend("transformers", form, args, model_dir)
            record(run_config(f"transformers/{form}", backend, cases, tokenizer))
            backend.close()
    print(json.dumps([{k: v for k, v in r.items() if k not in ("raw_replies", "accepted_samples")}
                      for r in results], indent=1))


if __name__ == "__main__":
    main()
