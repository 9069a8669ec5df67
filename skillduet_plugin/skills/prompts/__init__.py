"""Prompt templates of the analyzer and synthesizer, shipped as package data and loaded by name."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

from skillduet_plugin.core.settings import check

TEMPLATE_NAMES = ("local_pair", "local_procedure", "local_correction", "synthesize", "compress")


@lru_cache(maxsize=None)
def load_template(name: str) -> str:
    """The text of ``prompts/<name>.md``; placeholders are ``{{field}}``."""
    check("template name", name, choices=TEMPLATE_NAMES)
    return resources.files(__name__).joinpath(f"{name}.md").read_text(encoding="utf-8")


def fill(template: str, **fields: str) -> str:
    """Replace ``{{field}}`` placeholders literally (skill and trajectory text may contain braces)."""
    out = template
    for key, value in fields.items():
        out = out.replace("{{" + key + "}}", str(value))
    return out


def render(name: str, **fields: str) -> tuple[str, str]:
    """``(system, user)`` messages of template ``name``: the part before ``=== USER ===`` is the system prompt."""
    text = fill(load_template(name), **fields)
    system, sep, user = text.partition("=== USER ===")
    if not sep:
        return "", text.strip()
    return system.strip(), user.strip()
