"""The offline tiny model/tokenizer and the chat tokenisation of multi-turn episodes."""

from __future__ import annotations

import subprocess
import sys

import torch

from skillduet_plugin.core.conversation import ChatTokenizer, EpisodeTokens


def test_tiny_model_reloads_offline(tiny_model_dir, tiny_tokenizer):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    n_params = sum(p.numel() for p in model.parameters())
    assert 50_000 < n_params < 5_000_000
    text = "<think>the knife is dirty</think><action>clean knife 1 with sinkbasin 1</action>"
    ids = tiny_tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tiny_tokenizer.decode(ids) == text
    assert tiny_tokenizer.eos_token == "<|im_end|>" and tiny_tokenizer.pad_token == "<|endoftext|>"
    out = model(input_ids=torch.tensor([ids])).logits
    assert out.shape == (1, len(ids), len(tiny_tokenizer))


def test_tiny_build_is_deterministic(tmp_path):
    from skillduet_plugin.warmstart.tiny_model import build_tiny
    from transformers import AutoTokenizer

    a = AutoTokenizer.from_pretrained(build_tiny(tmp_path / "a"))
    b = AutoTokenizer.from_pretrained(build_tiny(tmp_path / "b"))
    assert a.get_vocab() == b.get_vocab()


def test_chat_tokenizer_turns_concatenate_to_the_full_template(tiny_tokenizer):
    chat = ChatTokenizer(tiny_tokenizer)
    msgs = [{"role": "system", "content": "You are an agent."},
            {"role": "user", "content": "Your task is to: put a mug in cabinet.\nobs 1"}]
    episode = EpisodeTokens(prompt_ids=chat.prompt_ids(msgs))
    answer1 = chat.encode("<think>go</think><action>go to cabinet 1</action>") + [chat.eos_token_id]
    episode.add_policy(answer1)
    episode.add_env(chat.turn_ids("You arrive at cabinet 1."))
    answer2 = chat.encode("<action>look</action>") + [chat.eos_token_id]
    episode.add_policy(answer2)
    full = msgs + [{"role": "assistant", "content": "<think>go</think><action>go to cabinet 1</action>"},
                   {"role": "user", "content": "You arrive at cabinet 1."},
                   {"role": "assistant", "content": "<action>look</action>"}]
    expected = chat.encode(chat.render(full, add_generation_prompt=False))
    # the template ends each turn with eos + newline; our sequence stops right after the final eos
    assert episode.context_ids == expected[: len(episode.context_ids)]
    assert len(expected) - len(episode.context_ids) == len(chat.encode("\n"))
    assert episode.completion_mask == [1] * len(answer1) + [0] * (
        len(episode.completion_ids) - len(answer1) - len(answer2)) + [1] * len(answer2)


def test_cli_help_lists_subcommands():
    out = subprocess.run([sys.executable, "-m", "skillduet_plugin.cli", "--help"], capture_output=True,
                         text=True, check=True).stdout
    for name in ("train", "eval", "skills", "report", "tiny-model"):
        assert name in out


def test_cli_tiny_model(tmp_path):
    from skillduet_plugin.cli import main

    assert main(["tiny-model", str(tmp_path / "m")]) == 0
    assert (tmp_path / "m" / "config.json").exists() and (tmp_path / "m" / "tokenizer.json").exists()


def test_cli_tiny_model_for_an_environment_is_the_build_its_runs_use(tmp_path, monkeypatch, capsys):
    """``--env webshop`` writes the build ``skillduet train env=webshop`` resolves (same key, same weights); an
    unknown environment is one line naming the option and the registered names, before anything is written."""
    import json

    from skillduet_plugin.cli import main
    from skillduet_plugin.runs.rundir import resolve_model
    from skillduet_plugin.warmstart.tiny_model import tiny_key

    monkeypatch.setenv("SKILLDUET_CACHE", str(tmp_path / "cache"))
    assert main(["tiny-model", str(tmp_path / "bad"), "--env", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--env='nope'" in err and "webshop" in err
    assert not (tmp_path / "bad").exists()
    assert main(["tiny-model", str(tmp_path / "shop"), "--env", "webshop"]) == 0
    ours, runs = tmp_path / "shop", resolve_model("tiny", env="webshop")
    assert json.loads((ours / "config.json").read_text())["vocab_size"] > 2000
    assert (ours / "tokenizer.json").read_bytes() == (runs / "tokenizer.json").read_bytes()
    assert (ours / "model.safetensors").read_bytes() == (runs / "model.safetensors").read_bytes()
    assert tiny_key(corpus="webshop") != tiny_key()  # negative control: the option changes the build


def _with_template(tokenizer, name):
    import copy
    import importlib.resources

    tok = copy.deepcopy(tokenizer)
    tok.chat_template = importlib.resources.files("trl").joinpath(f"chat_templates/{name}.jinja").read_text()
    return tok


def test_turn_frame_with_qwen3_template_matches_a_full_render(tiny_tokenizer):
    """Qwen3 renders the last assistant turn with an empty think block: the frame must come from a middle turn."""
    import pytest

    pytest.importorskip("trl")
    for name, kwargs in (("qwen3", {}), ("qwen3", {"enable_thinking": False}), ("qwen2_5", {})):
        tok = _with_template(tiny_tokenizer, name)
        chat = ChatTokenizer(tok, chat_template_kwargs=kwargs)
        msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task A"}]
        frame = chat._turn_prefix + "OBS" + chat._turn_suffix
        full = chat.render(msgs + [{"role": "assistant", "content": "act 1"}, {"role": "user", "content": "OBS"},
                                   {"role": "assistant", "content": "act 2"}, {"role": "user", "content": "OBS2"}],
                           add_generation_prompt=True)
        eos_text = tok.convert_ids_to_tokens(chat.eos_token_id)
        # what follows a finished assistant turn: the user turn, then the generation prompt the model sees
        assert full.endswith("act 2" + eos_text + chat._turn_prefix + "OBS2" + chat._turn_suffix), (name, kwargs)
        assert "act 1" + eos_text + chat._turn_prefix + "OBS" in full, (name, kwargs, frame)
        assert frame.endswith(chat.render([{"role": "user", "content": "x"}], True).split("x", 1)[1]), name


def test_a_webshop_tiny_build_learns_the_catalogue_words(tmp_path, monkeypatch):
    """``corpus="webshop"``: the tokenizer also learns the synthetic catalogue's text (2,048 tokens), so a colour
    or product word of an instruction is one token where the default build splits it into byte pairs; the
    default build's key (and so every ALFWorld run's model) is unchanged by the option, and resolve_model
    builds the WebShop one for env=webshop only."""
    from transformers import AutoTokenizer

    from skillduet_plugin.runs.rundir import resolve_model
    from skillduet_plugin.warmstart.tiny_model import build_tiny, tiny_key

    monkeypatch.setenv("SKILLDUET_CACHE", str(tmp_path / "cache"))
    plain = AutoTokenizer.from_pretrained(build_tiny(tmp_path / "plain"))
    shop = AutoTokenizer.from_pretrained(build_tiny(tmp_path / "shop", corpus="webshop"))
    assert len(plain) < 1100 and 2000 < len(shop) <= 2048 + 16
    for word in (" purple", " headphones", " olive"):
        assert len(shop(word, add_special_tokens=False)["input_ids"]) == 1
    assert len(plain(" purple", add_special_tokens=False)["input_ids"]) > 1  # negative control
    assert "corpus" not in tiny_key() and tiny_key(corpus="alfworld") == tiny_key()  # no corpus registered
    assert tiny_key(vocab_size=2048, corpus="webshop")["corpus"] == "webshop"
    assert "webshop" in resolve_model("tiny", env="webshop").name
    assert "webshop" not in resolve_model("tiny", env="alfworld").name
