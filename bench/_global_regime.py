"""The step-overhead benchmarks' steady-state regime: a Global at its token budget in every rollout prompt.

In a short run with the paper's schedule (a consolidation every 10 steps) no Global exists, so the timed steps
are the cheap regime. Here the skill bank is seeded before the run with one synthetic Global per scope the games
use, cut to ``skill_token_budget`` tokens of the policy tokenizer by the product's own truncation
(``skills.budget.truncate_lines``) and committed through the bank's own API (``SkillBank.commit_consolidation``
at step 0), so every rollout prompt carries it from the first step on, as it would after the first consolidation
of a long run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from skillduet_plugin.config import SkillDuetConfig
from skillduet_plugin.core.names import scope_key
from skillduet_plugin.skills.bank import SkillBank
from skillduet_plugin.skills.budget import count_tokens, truncate_lines
from skillduet_plugin.skills.consolidate import render_global

#: The budget the ALFWorld demo runs with: it leaves ``skillduet.skill_token_budget`` at the method's default
#: (examples/cpu_demo.yaml sets only the warm start's own budget), as does the paper-scale recipe
#: (examples/qwen3_4b_alfworld.yaml: 1024).
DEMO_GLOBAL_BUDGET = SkillDuetConfig().skill_token_budget

#: The selector name recorded on the seeded versions, so a bank read later says where they came from.
SEEDED_SELECTOR = "bench_seeded"

_STEPS = ("go to the receptacle where the {o} usually is before opening anything else",
          "take the {o} from the first receptacle that shows it and keep it in hand",
          "when the task names a place, check the place once more before acting on the {o}",
          "open a closed {p} before looking inside; close it only when the task needs it",
          "use the {p} for the {o} only after the {o} is in hand",
          "do not repeat an action that failed; try the next receptacle in the room",
          "if the {o} is not on the {p}, look at the countertops and the diningtable next")
_OBJECTS = ("apple", "mug", "plate", "knife", "tomato", "bowl", "cup", "pan", "egg", "lettuce", "potato")
_PLACES = ("fridge", "microwave", "sinkbasin", "cabinet", "drawer", "countertop", "stoveburner", "shelf")


@dataclass(frozen=True)
class SeededGlobals:
    """What was seeded: the scopes, the Global text and its length in policy tokens (``<= budget``)."""

    scopes: tuple[str, ...]
    text: str
    tokens: int
    budget: int


#: --regime choices of the step-overhead benchmarks, and the SkillDuet configuration each regime times against
#: the one GRPO configuration
REGIMES = ("none", "global", "both")
REGIME_CONFIG = {"none": "skillduet", "global": "skillduet_global"}


def add_regime_arguments(parser: Any, regime_help: str) -> None:
    """``--regime`` and ``--global-tokens``, as both step-overhead benchmarks take them."""
    parser.add_argument("--regime", default="none", choices=REGIMES, help=regime_help)
    parser.add_argument("--global-tokens", type=int, default=DEMO_GLOBAL_BUDGET,
                        help="the global regime's skillduet.skill_token_budget, the seeded Global's length "
                             f"(default {DEMO_GLOBAL_BUDGET}, the ALFWorld demo's)")


def global_text(budget: int, tokenizer: Any) -> str:
    """A Global of plausible skill lines, at most ``budget`` tokens of ``tokenizer`` and within one line of it."""
    if budget < 16:
        raise ValueError(f"budget={budget}: a Global's token budget is at least 16 (skillduet.skill_token_budget)")
    items: list[str] = []
    i = 0
    while count_tokens(render_global(items), tokenizer) <= budget + 64:  # overshoot, then cut to whole lines
        step = _STEPS[i % len(_STEPS)].format(o=_OBJECTS[i % len(_OBJECTS)], p=_PLACES[(i // 2) % len(_PLACES)])
        items.append(f"{step} (rule {i + 1})")
        i += 1
    text, _ = truncate_lines(render_global(items), budget, tokenizer)
    return text


def game_scopes(env: str, scope: str = "task_type", *, split: str = "train",
                env_kwargs: dict | None = None) -> list[str]:
    """The scope keys of every task of ``split`` of ``env`` under the ``scope`` setting (no game is played)."""
    from skillduet_plugin.envs import make

    with make(env, split=split, **(env_kwargs or {})) as handle:
        return sorted({scope_key(scope, task_type=handle.task_type(t), task_id=t) for t in handle.tasks})


def seed_globals(bank: SkillBank, scopes: Iterable[str], budget: int, tokenizer: Any) -> SeededGlobals:
    """Commit one Global of ``budget`` tokens per scope to ``bank`` as a consolidation at step 0."""
    scopes = tuple(sorted(set(scopes)))
    if not scopes:
        raise ValueError("scopes is empty: seed at least one scope (game_scopes() lists the games' scopes)")
    text = global_text(budget, tokenizer)
    items = [line[2:] for line in text.split("\n")]  # render_global's "- " taken off again
    bank.commit_consolidation(0, [{"scope": s, "items": items, "text": text, "selector": SEEDED_SELECTOR, "report": {}}
                                  for s in scopes])
    return SeededGlobals(scopes=scopes, text=text, tokens=count_tokens(text, tokenizer), budget=budget)


def seed_bank_file(path: str | Path, scopes: Iterable[str], budget: int, tokenizer: Any) -> SeededGlobals:
    """A new bank file at ``path`` seeded by :func:`seed_globals` (for a run in another process, e.g. verl's)."""
    bank = SkillBank(path)
    try:
        return seed_globals(bank, scopes, budget, tokenizer)
    finally:
        bank.close()


__all__ = ["DEMO_GLOBAL_BUDGET", "REGIME_CONFIG", "REGIMES", "SEEDED_SELECTOR", "SeededGlobals", "add_regime_arguments",
           "game_scopes", "global_text", "seed_bank_file", "seed_globals"]
