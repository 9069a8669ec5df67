"""``skillduet tiny-model OUT_DIR``: build the tiny offline tokenizer and Qwen3 model."""

from __future__ import annotations

import argparse
import sys

from skillduet_plugin.config import ConfigError
from skillduet_plugin.envs.registry import env_spec
from skillduet_plugin.warmstart.tiny_model import SIZES, build_tiny


def add_arguments(parser: argparse.ArgumentParser) -> None:

    parser.add_argument("out_dir", help="folder to write the tokenizer and model into")
    parser.add_argument("--size", default="tiny", choices=sorted(SIZES), help="model shape (default: tiny)")
    parser.add_argument("--vocab-size", type=int, default=1024, help="BPE vocabulary size (default: 1024)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--env", default=None,
                        help="an environment whose own text the tokenizer also learns, as `skillduet train env=NAME` "
                             "builds it (webshop: the catalogue's words, 2,048 tokens, replacing --vocab-size)")
    parser.add_argument("--overwrite", action="store_true", help="rebuild even if the folder holds this build")


def run(args: argparse.Namespace) -> int:

    if args.env is not None:

        try:
            env_spec(args.env)  # before any work
        except ConfigError as err:
            print(f"skillduet tiny-model: --{err}", file=sys.stderr)
            return 2
    out = build_tiny(args.out_dir, size=args.size, vocab_size=args.vocab_size, seed=args.seed,
                     overwrite=args.overwrite, corpus=args.env)
    print(out)
    return 0
