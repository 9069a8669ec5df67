"""``docs/configuration.md``, rendered from the settings classes' own help texts (so the docs cannot drift).

``python -m skillduet_plugin.runs.settings_docs > docs/configuration.md`` regenerates it; a test checks it is
current. ``skillduet train --help`` renders the same rows (``runs.config.settings_help``).
"""

from __future__ import annotations

import dataclasses

from skillduet_plugin.config import SkillDuetConfig
from skillduet_plugin.core.settings import field_docs, render_markdown
from skillduet_plugin.integrations.verl.settings import VerlSettings
from skillduet_plugin.runs.config import RunConfig, method_rows


def _own_fields(cls: type, base: type) -> list[tuple[str, str, str]]:
    inherited = {f.name for f in dataclasses.fields(base)}
    return [row for row in field_docs(cls) if row[0] not in inherited]


def render() -> str:
    from trl import GRPOConfig  # lazy: trl

    from skillduet_plugin.integrations.trl.config import SkillDuetGRPOConfig  # lazy: imports torch

    parts = [
        "# Configuration reference\n",
        "Generated from the settings classes' help texts by `python -m skillduet_plugin.runs.settings_docs > "
        "docs/configuration.md` (a test keeps it current). Every value is checked when the config is built; a bad "
        "one is a one-line error naming the key, the value and the fix.\n",
        "## `skillduet train` (YAML keys or dotted `key=value` overrides)\n",
        render_markdown(field_docs(RunConfig) + method_rows()),
        "## The method (`skillduet:` in every config; `SkillDuetConfig`)\n",
        render_markdown(field_docs(SkillDuetConfig)),
        "## TRL: `SkillDuetGRPOConfig` (GRPOConfig's own fields plus these)\n",
        render_markdown(_own_fields(SkillDuetGRPOConfig, GRPOConfig)),
        "## verl: the `skillduet:` section (the method keys above sit directly under `skillduet.`; with stock "
        "`verl.trainer.main_ppo` each key takes a `+`: `+skillduet.opd_coef=0.2`)\n",
        render_markdown([row for row in field_docs(VerlSettings, "skillduet.")
                         if not row[0].startswith("skillduet.method.")]),
    ]
    return "\n".join(parts)


if __name__ == "__main__":
    print(render(), end="")
