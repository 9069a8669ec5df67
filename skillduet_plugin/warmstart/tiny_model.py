"""The CPU demo's model (also the tests' model): a tiny tokenizer and Qwen3 causal LM built offline in seconds.

The tokenizer is a byte-level BPE trained on ALFWorld- and WebShop-flavoured text generated here, with ChatML
special tokens and a ChatML chat template; a build for one environment (``corpus=``, e.g. ``webshop``) also
learns that environment's own vocabulary (the text registered with :func:`register_tiny_corpus`, with a larger
vocabulary), so that
its words are single tokens as ALFWorld's objects are in the default build. The model is a randomly initialised
``Qwen3ForCausalLM``. Both are saved to a folder that ``AutoTokenizer``/``AutoModelForCausalLM.from_pretrained``
load with no hub access.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from dataclasses import dataclass
from typing import Callable, Sequence

from skillduet_plugin.core.artefacts import MARKER, building, code_digest, read_marker
from skillduet_plugin.core.settings import check
from skillduet_plugin.envs.registry import env_spec, load_environments
from skillduet_plugin.envs.webshop import vocabulary as webshop_vocabulary
from skillduet_plugin.rollout.choice import action_response

CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

STAMP = "skillduet_tiny.json"  # a build's key, also inside the model folder a warm start copies it from
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED_TOKENS = ["<think>", "</think>", "<action>", "</action>"]

# Model shapes: name -> Qwen3Config keywords (vocab size comes from the tokenizer).
# The environments whose prompt text the tokenizer learns as words (fixed: the vocabulary must not change when
# an environment is registered).
CORPUS_ENVS = ("alfworld", "webshop")

SIZES: dict[str, dict[str, int]] = {
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16),
    "small": dict(hidden_size=192, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=48),
    "base": dict(hidden_size=256, intermediate_size=768, num_hidden_layers=6, num_attention_heads=8,
                 num_key_value_heads=4, head_dim=32),
    # "tiny" with vLLM's CPU attention (head sizes 32, 64, 80, ...; 16 is refused): the verl + vLLM CPU runs
    "tiny64": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                   num_key_value_heads=1, head_dim=64),
}

_OBJECTS = ("alarmclock apple bowl bread butterknife candle cd cellphone cloth creditcard cup dishsponge egg "
            "fork glassbottle kettle keychain knife ladle laptop lettuce mug newspaper pan pen pencil "
            "peppershaker pillow plate pot potato remotecontrol saltshaker soapbar spatula spoon spraybottle "
            "statue tomato towel vase watch winebottle book box basketball baseballbat bowl houseplant "
            "tissuebox toiletpaper handtowel desklamp floorlamp").split()
_RECEPTACLES = ("armchair bathtubbasin bed cabinet coffeemachine coffeetable countertop desk diningtable "
                "drawer dresser fridge garbagecan handtowelholder laundryhamper microwave ottoman shelf "
                "sidetable sinkbasin sofa stoveburner toaster toilet toiletpaperhanger towelholder safe "
                "cart").split()
_WEB_WORDS = ("women men shoes running sneakers shirt cotton long sleeve dress pants jeans jacket hoodie "
              "wireless bluetooth headphones speaker charger cable usb phone case tablet laptop stand "
              "rug area square round easy clean machine washable turquoise blue black white red green gray "
              "pink navy beige small medium large x-large size color pack count ounce organic gluten free "
              "vegan snack coffee tea shampoo conditioner hair lotion moisturizer sunscreen spf natural "
              "wood metal glass storage bedroom living room kitchen bathroom office chair desk lamp").split()
_PHRASES = [
    "You are an expert agent operating in the ALFRED Embodied Environment.",
    "You are an expert autonomous agent operating in the WebShop e-commerce environment.",
    "Your task is to:", "Your current observation is:", "Your admissible actions of the current situation are:",
    "Prior to this step, you have already taken", "step(s).", "Below are the most recent",
    "observations and the corresponding actions you took:", "You are now at step",
    "Now it's your turn to take an action.",
    "You should first reason step-by-step about the current situation. This reasoning process MUST be "
    "enclosed within <think> </think> tags.",
    "Once you've finished your reasoning, you should choose an admissible action for current step and "
    "present it within <action> </action> tags.",
    "## Skills", "## Skills for this task", "## Hindsight skill", "Useful skills:", "- Procedure:",
    "- Correction:", "- Avoid:", "When", "first", "then", "before", "after", "never", "always",
    "Nothing happens.", "You are not carrying anything.", "You are carrying:",
    "-= Welcome to TextWorld, ALFRED! =-", "You are in the middle of a room. Looking quickly around you, you see",
    "Instruction:", "[SEP]", "Search", "Back to Search", "Next >", "< Prev", "Buy Now", "Description",
    "Features", "Reviews", "Price:", "Rating: N.A.", "Page 1 (Total results: 50)",
    "Thank you for shopping with us!", "and price lower than", "dollars",
]
_TASKS = [
    "put a {o} in {r}.", "put some {o} on {r}.", "look at {o} under the desklamp.",
    "examine the {o} with the floorlamp.", "put a clean {o} in {r}.", "clean some {o} and put it in {r}.",
    "put a hot {o} in {r}.", "heat some {o} and put it in {r}.", "put a cool {o} in {r}.",
    "cool some {o} and put it in {r}.", "put two {o} in {r}.", "find two {o} and put them in {r}.",
]


def _prompt_lines() -> list[str]:
    """The fixed text of the environments' prompt templates and of the constrained-choice responses, so that
    the words every turn repeats become single tokens (a turn of the CPU demo is then ~40% shorter)."""

    lines = []
    for env in CORPUS_ENVS:
        for text in env_spec(env).prompts.templates.texts():
            lines.append(re.sub(r"\{\w+\}", "", text))
    verbs = ("go to", "take", "move", "open", "close", "heat", "cool", "clean", "use", "examine", "search", "click")
    lines += [action_response(v) for v in verbs]
    return lines


def corpus_lines(n: int = 4000, seed: int = 0, prompt_weight: int = 200) -> list[str]:
    """Deterministic training text for the tiny tokenizer (environment and prompt vocabulary); the prompt
    templates' own text is repeated ``prompt_weight`` times."""
    rng = random.Random(seed)
    lines = list(_PHRASES) + _prompt_lines() * prompt_weight
    for _ in range(n):
        o, r = rng.choice(_OBJECTS), rng.choice(_RECEPTACLES)
        i, j = rng.randint(1, 9), rng.randint(1, 9)
        kind = rng.randrange(10)
        if kind == 0:
            lines.append("Your task is to: " + rng.choice(_TASKS).format(o=o, r=r))
        elif kind == 1:
            seen = ", ".join(f"a {rng.choice(_RECEPTACLES)} {rng.randint(1, 6)}" for _ in range(rng.randint(2, 6)))
            lines.append(f"You arrive at {r} {j}. On the {r} {j}, you see {seen}.")
        elif kind == 2:
            act = rng.choice([f"go to {r} {j}", f"take {o} {i} from {r} {j}", f"move {o} {i} to {r} {j}",
                              f"open {r} {j}", f"close {r} {j}", f"heat {o} {i} with microwave 1",
                              f"cool {o} {i} with fridge 1", f"clean {o} {i} with sinkbasin 1",
                              f"use desklamp {i}", f"examine {r} {j}", "inventory", "look"])
            lines.append(f"<think>I need the {o}, so I should {act}.</think><action>{act}</action>")
        elif kind == 3:
            lines.append(f"You pick up the {o} {i} from the {r} {j}. You move the {o} {i} to the {r} {j}.")
        elif kind == 4:
            words = " ".join(rng.choice(_WEB_WORDS) for _ in range(rng.randint(3, 9)))
            lines.append(f"i need {words}, and price lower than {rng.randint(10, 90)}.00 dollars")
        elif kind == 5:
            words = " ".join(rng.choice(_WEB_WORDS) for _ in range(rng.randint(2, 6)))
            lines.append(f"<action>search[{words}]</action> <action>click[b0{rng.randint(10**7, 10**8 - 1)}]</action>")
        elif kind == 6:
            words = " ".join(rng.choice(_WEB_WORDS) for _ in range(rng.randint(3, 8)))
            lines.append(f"Back to Search [SEP] < Prev [SEP] {words} [SEP] Price: ${rng.randint(5, 99)}.99 "
                         f"[SEP] Buy Now")
        elif kind == 7:
            lines.append(f"- Procedure: go to the {r}, take the {o}, then move it to the {r}.")
        elif kind == 8:
            lines.append(f"- Correction: open the {r} before taking the {o}; never move an unclean {o}.")
        else:
            lines.append(f"'go to {r} {j}', 'take {o} {i} from {r} {j}', 'inventory', 'look', 'examine {r} {j}'")
    return lines


def build_tokenizer(vocab_size: int = 1024, seed: int = 0, extra_lines: Sequence[str] = ()):
    """A byte-level BPE ``PreTrainedTokenizerFast`` with ChatML specials and chat template, trained on
    :func:`corpus_lines` and ``extra_lines``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # lazy: tokenizers
    from transformers import PreTrainedTokenizerFast  # lazy: transformers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS + ADDED_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus_lines(seed=seed) + list(extra_lines), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token=None, unk_token=None, padding_side="left")
    fast.add_special_tokens({"additional_special_tokens": ["<|im_start|>"]})
    fast.chat_template = CHATML_TEMPLATE
    return fast


def build_model(tokenizer, size: str = "tiny", seed: int = 0, max_position_embeddings: int = 4096):
    """A randomly initialised ``Qwen3ForCausalLM`` of the named size for ``tokenizer``."""
    import torch  # lazy: torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM  # lazy: transformers

    check("size", size, choices=tuple(SIZES))
    torch.manual_seed(seed)
    config = Qwen3Config(vocab_size=len(tokenizer), max_position_embeddings=max_position_embeddings,
                         tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, bos_token_id=None, **SIZES[size])
    model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id, do_sample=True)
    return model


# The code whose output a tiny build is: its key names it, so an edit rebuilds instead of reusing a stale build.
BUILD_CODE = ("skillduet_plugin.warmstart.tiny_model", "skillduet_plugin.envs.prompts",
              "skillduet_plugin.rollout.choice", "skillduet_plugin.rollout.responses")


@dataclass(frozen=True)
class TinyCorpus:
    """An environment's own text that a tiny model built for it learns as tokens: ``lines()`` (product words,
    option values...) and the vocabulary size of such a build."""

    lines: Callable[[], list[str]]
    vocab_size: int


#: environment name -> its tiny-model corpus (:func:`register_tiny_corpus`)
TINY_CORPORA: dict[str, TinyCorpus] = {}


def register_tiny_corpus(env: str, lines: Callable[[], list[str]], vocab_size: int) -> None:
    """Give the environment ``env`` a tokenizer corpus of its own: ``build_tiny(corpus=env)`` (what ``skillduet
    train env=<env>`` builds) then also learns ``lines()``, with ``vocab_size`` tokens."""
    TINY_CORPORA[env] = TinyCorpus(lines, int(vocab_size))


register_tiny_corpus("webshop", webshop_vocabulary.corpus_lines, webshop_vocabulary.VOCAB_SIZE)


def corpus_spec(corpus: str | None) -> TinyCorpus | None:
    """The tiny-model corpus registered for the environment ``corpus``, else None: the default build
    (``corpus=None``, or an environment that registers none)."""
    if corpus is None:
        return None
    load_environments()  # an installed environment's module registers its corpus when loaded
    return TINY_CORPORA.get(corpus)


def tiny_key(size: str = "tiny", vocab_size: int = 1024, seed: int = 0, corpus: str | None = None) -> dict:
    """Everything a tiny build depends on (its cache key); a build with an environment's corpus has that
    environment's vocabulary size and also names the environment, the code of its corpus function and its data's
    identity."""
    import tokenizers  # lazy: tokenizers
    import torch  # lazy: torch
    import transformers  # lazy: transformers

    spec = corpus_spec(corpus)
    key = {"artefact": "tiny-model", "size": size, "vocab_size": spec.vocab_size if spec else vocab_size,
           "seed": seed, "code": code_digest(*BUILD_CODE), "torch": torch.__version__,
           "transformers": transformers.__version__, "tokenizers": tokenizers.__version__}
    if spec is not None:
        identity = env_spec(corpus).data.default_data_identity
        key.update(corpus=corpus, corpus_code=code_digest(spec.lines.__module__),
                   corpus_data=identity() if identity is not None else None)
    return key


def build_tiny(out_dir: str | Path, size: str = "tiny", vocab_size: int = 1024, seed: int = 0,
               overwrite: bool = False, corpus: str | None = None) -> Path:
    """Build tokenizer + model into ``out_dir``, atomically (a temporary sibling folder renamed into place), or
    reuse it when it already holds a complete, verified build with the same key (:func:`tiny_key`).

    An existing ``out_dir`` that is neither empty nor a tiny build is refused, so that no unrelated folder is
    replaced. ``corpus`` names an environment whose own text the tokenizer also learns (see the module doc);
    its registered vocabulary size then replaces ``vocab_size``."""

    if size not in SIZES:
        raise ValueError(f"size={size!r} is invalid: allowed values are {', '.join(SIZES)}")
    out = Path(out_dir)
    key = tiny_key(size, vocab_size, seed, corpus)
    if not overwrite and read_marker(out, key) is not None:
        return out
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).is_file() and not (out / STAMP).is_file():
        raise ValueError(f"out_dir={str(out)!r} is invalid: it holds files that are not a tiny build; pass an "
                         f"empty or new folder")
    with building(out, key) as tmp:
        spec = corpus_spec(corpus)
        tokenizer = build_tokenizer(vocab_size=key["vocab_size"], seed=seed,
                                    extra_lines=spec.lines() if spec is not None else ())
        model = build_model(tokenizer, size=size, seed=seed)
        tokenizer.save_pretrained(tmp)
        model.save_pretrained(tmp)
        (tmp / STAMP).write_text(json.dumps(key, sort_keys=True))
    return out
