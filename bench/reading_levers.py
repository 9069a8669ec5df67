"""Levers for a warm start that reads skill content outside the product's designs, each measured with the
skill-reading probe on unseen games. The product's designs (``warm_start.design=search`` or ``reading``) are
probed through the run config: ``python bench/skill_reading.py --set warm_start.design=reading``.

This script builds a variant clone and runs ``bench/skill_reading.py``'s probe on the ``valid_unseen`` panel
(games the clone never saw):

- ``--design balanced``: per training game, one episode with the same game's Local skill (written by the offline
  analyzer from another expert episode of the game; the expert acts on it), one with another game's skill of the
  type (``--wrong ignore``: the expert searches as without it; ``--wrong follow``: it acts on it too) and one with
  no section, so only a skill's content, never its presence, tells where to go (``--copies`` repeats the set with
  other search orders);
- the expert that acts on a skill (the environment's, ``envs.alfworld.expert``) goes first to the receptacles it
  names and, for ``look``, to where it says the lamp was used;
- ``--model tiny:small`` / ``tiny:base``: a larger built-in model; ``--set data_dir=<folder>``: the real ALFWorld
  games (extracted outside the repository).

    python bench/reading_levers.py --name balanced --design balanced --wrong ignore --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import _common  # noqa: E402  (offline environment variables; the shared probe helpers)
from bench.skill_reading import probe  # noqa: E402


def play(env: Any, task_id: str, *, max_turns: int, seed: int, hint: Sequence[str] = ()):
    """``warmstart.episodes.play_expert``: the environment's expert, acting on ``hint`` (a skill's donor actions:
    it goes first where they took the target and used the lamp)."""
    from skillduet_plugin.warmstart.episodes import play_expert

    return play_expert(env, task_id, max_turns=max_turns, seed=seed, hint=hint)


def balanced_records(env: Any, tasks: Sequence[str], *, max_turns: int, wrong: str, copies: int, env_name: str):
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
                out.append((play(env, t, max_turns=max_turns, seed=base + 2, hint=donors[t].actions),
                            skills[t], "right"))
            others = [o for o in tasks if o != t and o in skills and donors[o].scope == donors[t].scope]
            if others:
                o = others[(i + c) % len(others)]
                hint = donors[o].actions if wrong == "follow" else ()
                out.append((play(env, t, max_turns=max_turns, seed=base + 3, hint=hint), skills[o],
                            "wrong"))
            out.append((play_expert(env, t, max_turns=max_turns, seed=base + 4), None, "none"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True, help="the variant's folder under $SKILLDUET_CACHE/levers")
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--design", default="balanced", choices=("balanced",))
    parser.add_argument("--wrong", default="ignore", choices=("ignore", "follow"))
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
    if not (folder / "model.safetensors").exists():
        env = make_env(config, config.train_split, ws.games)
        try:
            rows = balanced_records(env, list(env.tasks)[:ws.games], max_turns=max_turns, wrong=args.wrong,
                                    copies=args.copies, env_name=config.env)
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

    result = probe(model, chat, panel_env, tasks, config.env, max_turns, config.max_total_tokens,
                   LOCAL_SKILL_TOKENS)
    result.pop("per_game")
    _common.probe_output({"lever": vars(args), "panel": args.panel, "games": len(tasks),
                          "warm_start_loss": info.get("loss_last"), "episodes": info.get("episodes"),
                          "result": result}, args.json, t0)


if __name__ == "__main__":
    main()
