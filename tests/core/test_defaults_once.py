"""A setting's default lives in its declaration only (``setting(...)`` in a settings dataclass): no function
signature, shell recipe, verl patch or README example restates it. (The verl YAML's ``skillduet:`` section is
generated from the declarations: tests/verl/test_settings_section.py.) A function below the config layer takes
the value from the config object, so a signature default equal to a setting's default is a second declaration that
can drift."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path
from typing import Any

from skillduet_plugin.config import SkillDuetConfig
from skillduet_plugin.core.episode import EpisodeSettings
from skillduet_plugin.integrations.verl.settings import EnvSettings, VerlSettings
from skillduet_plugin.llm.config import BackendConfig

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "skillduet_plugin"
#: parameter names that carry a setting under a shorter name
ALIASES = {"beta": "gate_beta", "estimator": "opd_estimator", "topk": "opd_topk"}
#: names every helper takes for its own purpose (a random helper's seed is no copy of the method's seed)
GENERIC = {"seed"}


def setting_defaults() -> dict[str, set[str]]:
    """Setting name -> the repr of its declared default(s), over every settings dataclass (booleans and None
    excepted: too common as flags to tell a copy from an unrelated switch)."""
    classes: list[Any] = [SkillDuetConfig, EpisodeSettings, BackendConfig, EnvSettings, VerlSettings]
    out: dict[str, set[str]] = {}
    for cls in classes:
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING and not isinstance(f.default, (bool, type(None))):
                out.setdefault(f.name, set()).add(repr(f.default))
    return out


def restated_in_signatures(package: Path, defaults: dict[str, set[str]]) -> dict[str, str]:
    """``path:function(parameter)`` -> default of every signature default equal to a setting's default."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            a = node.args
            positional = a.posonlyargs + a.args
            pairs = list(zip(positional[len(positional) - len(a.defaults):], a.defaults))
            pairs += [(arg, d) for arg, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
            for arg, default in pairs:
                name = ALIASES.get(arg.arg, arg.arg)
                if name in GENERIC or name not in defaults or not isinstance(default, ast.Constant):
                    continue
                if repr(default.value) in defaults[name]:
                    found[f"{path.relative_to(package)}:{node.name}({arg.arg})"] = repr(default.value)
    return found


_ASSIGNMENT = re.compile(r"\+{0,2}skillduet\.([\w.]+)=([^\s\"'$)]+)")


def restated_in_text(text: str, defaults: dict[str, set[str]]) -> list[str]:
    """``skillduet.<key>=<value>`` in a recipe or a patch where ``value`` is the setting's default, and any line
    that names a method setting next to its default's literal (``gate_beta ... 5.0``)."""
    found = []
    for line in text.splitlines():
        for key, value in _ASSIGNMENT.findall(line):
            leaf = key.split(".")[-1]
            if leaf in defaults and any(_same(value, d) for d in defaults[leaf]):
                found.append(line.strip())
        for name, literals in defaults.items():
            numbers = [re.escape(d) for d in literals if _numeric(d)]
            if numbers and re.search(rf"\b{name}\b", line) and \
                    re.search(rf"(?<![\w.])({'|'.join(numbers)})(?![\w.])", line):
                found.append(line.strip())
    return sorted(set(found))


_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)


def code_blocks(markdown: str) -> str:
    """The lines of a Markdown text's fenced code blocks (its examples; prose may name a default in words)."""
    return "".join(_FENCE.findall(markdown))


def _numeric(literal: str) -> bool:
    try:
        float(literal)
    except ValueError:
        return False
    return True


def _same(value: str, literal: str) -> bool:
    if _numeric(value) and _numeric(literal):
        return float(value) == float(literal)
    return value.strip("\"'") == literal.strip("'")


def test_no_signature_restates_a_settings_default():
    found = restated_in_signatures(PACKAGE, setting_defaults())
    assert found == {}, "signature defaults that restate a setting's default (take it from the config object): " + \
        ", ".join(f"{k}={v}" for k, v in sorted(found.items()))


def test_no_recipe_or_patch_restates_a_settings_default():
    defaults = setting_defaults()
    files = sorted((ROOT / "recipes").glob("*.sh")) + sorted((ROOT / "patches").glob("*.patch"))
    assert files
    found = {str(p.relative_to(ROOT)): restated_in_text(p.read_text(), defaults) for p in files}
    assert {k: v for k, v in found.items() if v} == {}


def test_no_readme_example_restates_a_settings_default():
    """An example states what it changes; a default written next to its setting can drift from the declaration."""
    found = restated_in_text(code_blocks((ROOT / "README.md").read_text()), setting_defaults())
    assert found == [], "README examples that restate a default (drop it, or change it on purpose): " + \
        " | ".join(found)


def test_a_restated_default_is_found(tmp_path):
    """Negative controls: a scratch module, recipe line and patch line that restate defaults."""
    defaults = setting_defaults()
    pkg = tmp_path / "scratch"
    pkg.mkdir()
    (pkg / "m.py").write_text("def gate(x, beta=5.0, seed=0, width=3):\n    return x\n\n\n"
                              "def update(*, opd_coef=0.1, keep_ratio=0.25):\n    return opd_coef\n")
    assert restated_in_signatures(pkg, defaults) == {"m.py:gate(beta)": "5.0", "m.py:update(opd_coef)": "0.1"}
    assert restated_in_text("run_recipe x skillduet.opd_coef=0.1 skillduet.keep_ratio=0.25", defaults) == \
        ["run_recipe x skillduet.opd_coef=0.1 skillduet.keep_ratio=0.25"]
    assert restated_in_text("    +skillduet.consolidation_interval=10 \\", defaults) != []
    assert restated_in_text("+  opd_gate = opd_per_token(s, t, beta=skillduet.gate_beta)", defaults) == []
    assert restated_in_text("+  beta = float(os.environ.get('GATE_BETA', 5.0))  # gate_beta", defaults) != []
    readme = ("Seeds 0,1,2 by default; seed 0 here.\n\n```bash\npython -m verl.trainer.main_ppo x "
              "+skillduet.env.name=alfworld\n```\n\n```python\ncfg = Config(max_turns=50, seed=3)\n```\n")
    assert restated_in_text(code_blocks(readme), defaults) == \
        ["cfg = Config(max_turns=50, seed=3)", "python -m verl.trainer.main_ppo x +skillduet.env.name=alfworld"]
