"""``skillduet score RUN_DIR --model M --skill TEXT``: Strength/Utility/Contrast of given skill texts on a run's
stored trajectories, with the given model (base and skill-conditioned log-probs both recomputed with it)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from skillduet_plugin.config import SkillDuetConfig
from skillduet_plugin.core.selectors import score_names
from skillduet_plugin.skills.bank import BANK_FILENAME
from skillduet_plugin.skills.sanitize import sanitize_skill, tokenizer_special_tokens
from skillduet_plugin.skills.trajectory_io import TRAJECTORY_DIRNAME, load_trajectories
from skillduet_plugin.skills.types import Skill


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", help="run folder (its skill_bank.sqlite supplies the Global in the prompts)")
    parser.add_argument("--model", required=True, help="model folder (transformers format) to score with")
    parser.add_argument("--skill", action="append", default=[], help="a skill text (repeatable)")
    parser.add_argument("--skill-file", action="append", default=[], help="a file holding one skill text")
    parser.add_argument("--scope", required=True, help="the scope the skills are for (e.g. a task type)")
    parser.add_argument("--trajectories", action="append", default=None,
                        help="JSONL file(s)/folder(s) of trajectories (default: RUN_DIR/trajectories)")
    parser.add_argument("--max-heldout", type=int, default=32, help="trajectories per skill (default: 32)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--token-budget", type=int, default=8192, help="padded tokens per forward")


def run(args: argparse.Namespace) -> int:

    texts = list(args.skill) + [Path(f).read_bytes() for f in args.skill_file]  # bytes: sanitize_skill decodes
    if not texts:
        print("skillduet score: give at least one --skill TEXT or --skill-file FILE", file=sys.stderr)
        return 2
    sources = args.trajectories or [str(Path(args.run_dir) / TRAJECTORY_DIRNAME)]
    try:
        trajectories = load_trajectories(sources)
    except FileNotFoundError as exc:
        print(f"skillduet score: {exc}. Trajectories are stored only when the trainer writes them "
              f"(skills.trajectory_io.save_trajectories); pass --trajectories FILE.jsonl", file=sys.stderr)
        return 2
    trajectories = [t for t in trajectories if t.scope == args.scope and t.completion_ids]
    if not trajectories:
        print(f"skillduet score: no trajectories with tokens in scope {args.scope!r}", file=sys.stderr)
        return 2

    import torch  # lazy: torch
    from transformers import AutoModelForCausalLM, AutoTokenizer  # lazy: transformers

    from skillduet_plugin.core.logprobs import response_logprobs  # lazy: imports torch
    from skillduet_plugin.skills.lifecycle import SkillLifecycle  # lazy: imports torch

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model).to(args.device).eval()
    config = SkillDuetConfig(heldout="same_scope", max_heldout=args.max_heldout)
    lifecycle = SkillLifecycle(config, Path(args.run_dir) / BANK_FILENAME, tokenizer=tokenizer, write=False,
                               similarity=None)
    for t in trajectories:  # both terms of Delta with the model given here
        t.base_logps = None
    skills = []
    for text in texts:
        clean, reason = sanitize_skill(text, config.max_skill_chars, tokenizer_special_tokens(tokenizer))
        if clean is None:
            print(f"skillduet score: skipping a skill text ({reason}): {text[:60]!r}", file=sys.stderr)
            continue
        skills.append(Skill(text=clean, scope=args.scope, kind="global"))
    pad = lifecycle.chat_tokenizer().pad_token_id

    def logprob_fn(contexts, responses):
        with torch.no_grad():
            return response_logprobs(model, contexts, responses, token_budget=args.token_budget, pad_token_id=pad)

    scores = lifecycle.score(skills, trajectories, logprob_fn)
    names = score_names()  # one column per registered score
    print(" ".join(f"{name:>10}" for name in names) + f" {'n':>4}  skill")
    for s in skills:
        sc = scores[s.skill_id]
        fmt = lambda v: "–".rjust(10) if v is None else f"{v:10.5f}"  # noqa: E731
        print(" ".join(fmt(sc.get(name)) for name in names) + f" {int(sc['n_heldout']):4d}  "
              f"{' '.join(s.text.split())[:80]}")
    lifecycle.close()
    return 0
