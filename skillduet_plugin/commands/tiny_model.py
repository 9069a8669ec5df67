"""``skillduet tiny-model OUT_DIR``: build the tiny offline tokenizer and Qwen3 model."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from skillduet_plugin.runs.tiny_model import SIZES

    parser.add_argument("out_dir", help="folder to write the tokenizer and model into")
    parser.add_argument("--size", default="tiny", choices=sorted(SIZES), help="model shape (default: tiny)")
    parser.add_argument("--vocab-size", type=int, default=1024, help="BPE vocabulary size (default: 1024)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--overwrite", action="store_true", help="rebuild even if the folder holds this build")


def run(args: argparse.Namespace) -> int:
    from skillduet_plugin.runs.tiny_model import build_tiny

    out = build_tiny(args.out_dir, size=args.size, vocab_size=args.vocab_size, seed=args.seed,
                     overwrite=args.overwrite)
    print(out)
    return 0
