"""Which grammar library constrains the transformers analyzer: the cost per generated token of the Local skill form
(``llm.reply_form.SKILL_REGEX``) with xgrammar and with llguidance on SmolLM2-135M-Instruct's tokenizer, both as
vLLM's CPU build ships them. Per library: the one-off compile, and per token the bitmask fill, its application to a
``(1, vocab)`` logits row and the advance over a tokenised skill in the form, interleaved (A B A B ...), median of
the repeats; a library that cannot follow the form on this tokenizer is reported with its error.

    python bench/analyzer_form_cost.py --json docs/results/analyzer_form_cost.json
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import _common  # noqa: E402  (offline environment variables, kernel pinning)

SKILL = ("<skill>\n- Search the sidetables and the dresser for the mug first.\n"
         "- Take the mug, then go to the desklamp and use it while you hold the mug.\n</skill>")


def _xgrammar(tokenizer, vocab: int, ids: list[int]):
    import torch
    import xgrammar as xgr

    from skillduet_plugin.llm.reply_form import SKILL_REGEX

    start = time.perf_counter()
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab, stop_token_ids=[tokenizer.eos_token_id])
    compiled = xgr.GrammarCompiler(info).compile_regex(SKILL_REGEX)
    compile_s = time.perf_counter() - start

    def run() -> None:
        matcher, mask = xgr.GrammarMatcher(compiled), xgr.allocate_token_bitmask(1, vocab)
        logits = torch.zeros(1, vocab)
        for token in ids:
            matcher.fill_next_token_bitmask(mask, 0)
            xgr.apply_token_bitmask_inplace(logits, mask)
            if not matcher.accept_token(token):
                raise RuntimeError(f"xgrammar refused token {token}")

    return compile_s, run


def _llguidance(tokenizer, vocab: int, ids: list[int]):
    import llguidance
    import llguidance.hf
    import llguidance.torch as lt
    import torch

    from skillduet_plugin.llm.reply_form import SKILL_REGEX

    start = time.perf_counter()
    lltok = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab)
    grammar = llguidance.LLMatcher.grammar_from_regex(SKILL_REGEX)
    compile_s = time.perf_counter() - start

    def run() -> None:
        matcher, mask = llguidance.LLMatcher(lltok, grammar), lt.allocate_token_bitmask(1, vocab)
        logits = torch.zeros(1, vocab)
        for token in ids:
            lt.fill_next_token_bitmask(matcher, mask, 0)
            lt.apply_token_bitmask_inplace(logits, mask)
            if not matcher.consume_token(token):
                raise RuntimeError(f"llguidance refused token {token}: {matcher.get_error()[:200]}")

    return compile_s, run


def main() -> None:
    parser = _common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--cache", default=str(Path.home() / ".cache/skillduet/analyzer_quality"))
    args = parser.parse_args()
    from transformers import AutoConfig, AutoTokenizer

    from bench.analyzer_quality import _smollm2

    folder = _smollm2(Path(args.cache))
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    vocab = int(AutoConfig.from_pretrained(str(folder)).vocab_size)
    ids = tokenizer(SKILL, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    results: dict = {"tokens": len(ids), "libraries": {}}
    runs = {}
    for name, build in (("xgrammar", _xgrammar), ("llguidance", _llguidance)):
        try:
            compile_s, run = build(tokenizer, vocab, ids[:-1])
            run()  # follows the form on this tokenizer, else the error is the result
            runs[name] = run
            results["libraries"][name] = {"compile_s": round(compile_s, 3)}
        except Exception as exc:  # noqa: BLE001 - a library that cannot do it is a result, not a crash
            results["libraries"][name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    timings = _common.interleaved(runs, repeats=_common.repeats_of(args), warmup=args.warmup) if runs else None
    for name in runs:
        results["libraries"][name]["ms_per_token"] = round(1000 * timings.median(name) / len(ids[:-1]), 4)
    best = min(runs, key=lambda n: timings.median(n)) if runs else "none"
    _common.report("fastest_that_follows_the_form", best, results, args)


if __name__ == "__main__":
    main()
