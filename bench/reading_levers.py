"""Levers for a warm start that reads skill content, each measured with the skill-reading probe on unseen games.

The demo's warm start (``warmstart.episodes``) gives a third of its episodes a Local skill and the expert acts on it,
right or wrong; its clone barely reads the skill (docs/study.md). This script builds a variant clone and runs
``bench/skill_reading.py``'s probe on the ``valid_unseen`` panel (games the clone never saw):

- ``--design balanced``: per training game, one episode with the same game's Local skill (written by the offline
  analyzer from another expert episode of the game; the expert acts on it), one with another game's skill of the
  type (``--wrong ignore``: the expert searches as without it; ``--wrong follow``: it acts on it too) and one with
  no section, so only a skill's content, never its presence, tells where to go (``--copies`` repeats the set with
  other search orders);
- ``--hint full``: the skill-following expert also goes first to where the skill says the lamp was used (the
  environment's expert follows only where the target was taken), so more of an episode's turns are what the skill
  says;
- ``--model tiny:small`` / ``tiny:base``: a larger built-in model; ``--set data_dir=<folder>``: the real ALFWorld
  games (extracted outside the repository).

    python bench/reading_levers.py --design balanced --wrong ignore --hint full --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import _common  # noqa: E402  (offline environment variables; the shared probe helpers)
from bench.skill_reading import probe  # noqa: E402
from skillduet_plugin.envs.alfworld.expert import (SearchingExpert, _class_of, hint_classes,  # noqa: E402
                                                   task_params)


def lamp_classes(actions: Sequence[str]) -> tuple[str, ...]:
    """Where another episode used the lamp: the receptacle class it stood at for its first ``use <lamp>`` (what
    a skill written from that episode says: "go to the dresser and use the desklamp")."""
    here = ""
    for a in actions:
        if a.startswith("go to "):
            here = a[len("go to "):]
        elif a.startswith("use ") and here:
            return (_class_of(here),)
    return ()


@dataclass
class SkillFollowingExpert(SearchingExpert):
    """The searching expert that also looks for the lamp first where ``lamp_first`` says (a skill's content)."""

    lamp_first: tuple[str, ...] = ()

    def _search(self, admissible: list[str], classes, first: tuple[str, ...] = ()) -> str:
        if self._holding and self.params.scope == "look" and not first:
            first = self.lamp_first
        return super()._search(admissible, classes, first)


def play(env: Any, task_id: str, *, max_turns: int, seed: int, hint: Sequence[str] = (), full: bool = False):
    """``warmstart.episodes.play_expert`` with the skill-following expert (``full``: the lamp too)."""
    from skillduet_plugin.warmstart.episodes import play_expert

    params = task_params(task_id)
    if not full or params is None:
        return play_expert(env, task_id, max_turns=max_turns, seed=seed, hint=hint)
    expert = SkillFollowingExpert(params, seed, hint_classes(list(hint)), lamp_first=lamp_classes(hint))
    return play_expert(env, task_id, max_turns=max_turns, seed=seed, hint=hint, expert=expert)


def balanced_records(env: Any, tasks: Sequence[str], *, max_turns: int, wrong: str, full: bool, copies: int,
                     env_name: str):
    """Per game and copy: (record, skill text or None, kind) for the right-skill, wrong-skill and no-skill
    episodes. Donors are seed-1 episodes (the probe's donors are the unseen games' own seed-1 episodes)."""
    from skillduet_plugin.warmstart.episodes import analyzer_skill, play_expert

    donors = {t: play_expert(env, t, max_turns=max_turns, seed=1) for t in tasks}
    skills = {t: analyzer_skill(d, env_name) for t, d in donors.items() if d.won}
    out = []
    for c in range(copies):
        for i, t in enumerate(tasks):
            base = 10 * c
            if t in skills:
                out.append((play(env, t, max_turns=max_turns, seed=base + 2, hint=donors[t].actions, full=full),
                            skills[t], "right"))
            others = [o for o in tasks if o != t and o in skills and donors[o].scope == donors[t].scope]
            if others:
                o = others[(i + c) % len(others)]
                hint = donors[o].actions if wrong == "follow" else ()
                out.append((play(env, t, max_turns=max_turns, seed=base + 3, hint=hint, full=full), skills[o],
                            "wrong"))
            out.append((play_expert(env, t, max_turns=max_turns, seed=base + 4), None, "none"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True, help="the variant's folder under $SKILLDUET_CACHE/levers")
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--design", default="balanced", choices=("balanced",))
    parser.add_argument("--wrong", default="ignore", choices=("ignore", "follow"))
    parser.add_argument("--hint", default="take", choices=("take", "full"))
    parser.add_argument("--copies", type=int, default=1)
    parser.add_argument("--steps", type=int, default=700)
    parser.add_argument("--learning-rate", type=float, default=0.006)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--panel", default="valid_unseen")
    parser.add_argument("--games", type=int, default=48)
    parser.add_argument("--set", action="append", default=[], help="run-config overrides (key=value)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from skillduet_plugin.core.conversation import ChatTokenizer
    from skillduet_plugin.runs.config import load_run_config
    from skillduet_plugin.runs.environment import make_env
    from skillduet_plugin.runs.rundir import cache_dir, resolve_model
    from skillduet_plugin.runs.trl_runner import set_threads
    from skillduet_plugin.warmstart.episodes import LOCAL_SKILL_TOKENS, SkillPlan, build_cloning_data, clone

    config = load_run_config(None, [f"seed={args.seed}", f"model={args.model}", *args.set])
    set_threads(config)
    t0 = time.time()
    ws = config.warm_start
    max_turns = ws.max_turns or config.max_turns
    base = resolve_model(config.model, seed=config.seed, env=config.env)
    tokenizer = AutoTokenizer.from_pretrained(base)
    chat = ChatTokenizer(tokenizer)
    folder = cache_dir() / "levers" / args.name
    full = args.hint == "full"
    if not (folder / "model.safetensors").exists():
        env = make_env(config, config.train_split, ws.games)
        try:
            rows = balanced_records(env, list(env.tasks)[:ws.games], max_turns=max_turns, wrong=args.wrong,
                                    full=full, copies=args.copies, env_name=config.env)
        finally:
            env.close()
        plans = [SkillPlan("local", text, 0) if text is not None else None for _, text, _ in rows]
        episodes = build_cloning_data([r for r, _, _ in rows], config.env, chat,
                                      max_total_tokens=config.max_total_tokens,
                                      plans=plans, skill_token_budget=ws.skill_token_budget,
                                      skill_position=config.method_config().skill_position)
        counts = {k: sum(kind == k for _, _, kind in rows) for k in ("right", "wrong", "none")}
        print(f"{len(episodes)} episodes ({counts}), {sum(e.won for e in episodes)} won, "
              f"{time.time() - t0:.0f}s", flush=True)
        torch.manual_seed(config.seed)
        model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
        stats = clone(model, episodes, steps=args.steps, batch_size=ws.batch_size, learning_rate=args.learning_rate,
                      seed=config.seed, pad_token_id=chat.pad_token_id)
        folder.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        (folder / "levers.json").write_text(json.dumps({"args": vars(args), "episodes": counts, **stats}, indent=1))
    info = json.loads((folder / "levers.json").read_text())
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    panel_env = make_env(config, args.panel)
    tasks = list(panel_env.tasks)[:args.games]

    def play_hinted(env_: Any, task: str, hint: Sequence[str]):
        return play(env_, task, max_turns=max_turns, seed=0, hint=hint, full=full)

    result = probe(model, chat, panel_env, tasks, config.env, max_turns, config.max_total_tokens,
                   LOCAL_SKILL_TOKENS, play_hinted=play_hinted)
    result.pop("per_game")
    _common.probe_output({"lever": vars(args), "panel": args.panel, "games": len(tasks),
                          "warm_start_loss": info.get("loss_last"), "episodes": info.get("episodes"),
                          "result": result}, args.json, t0)


if __name__ == "__main__":
    main()
