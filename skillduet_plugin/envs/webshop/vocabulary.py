"""The WebShop text a tiny model's tokenizer learns (``warmstart.tiny_model.register_tiny_corpus``): the default
synthetic catalogue's product titles, option values and training-goal instructions (goals 1,500 on, never the test or
eval goals).

With it, a product word, colour or size is one token instead of three to six byte pairs, as ALFWorld's object
names are in the default build, so that a two-layer model can match an instruction's words to a page's.
"""

from __future__ import annotations

from skillduet_plugin.envs.webshop.catalogue import ATTRIBUTE_FILES, PRODUCT_FILES, find_file, load_catalogue
from skillduet_plugin.envs.webshop.synthetic import ensure_default_data

VOCAB_SIZE = 2048
TRAIN_START = 1500  # the first training goal (envs.webshop.env.SPLITS)


def corpus_lines() -> list[str]:
    """Training instructions, then each product's title and option clicks, of the default synthetic catalogue."""

    folder = ensure_default_data()
    catalogue = load_catalogue(find_file(folder, PRODUCT_FILES, "product file"),
                               find_file(folder, ATTRIBUTE_FILES, "attribute file"))
    lines = [goal["instruction_text"] for goal in catalogue.goals[TRAIN_START:]]
    for product in catalogue.products:
        lines.append(product["Title"])
        lines += [" ".join(f"click[{value}]" for value in values) for values in product["options"].values()]
    return lines
