"""The warm-started model as a cache artefact: keyed by everything its weights depend on (and by nothing that
only the RL method reads, so GRPO and SkillDuet runs of one setting share it), built with a budget in steps only
(a progress bar and an up-front time estimate instead of a wall-clock cap), and written complete-or-absent
(``artefacts.building``), so a warm start killed midway is never reused as a model. What it had done is kept
beside the cache folder (:class:`BuildProgress`: the expert episodes once laid out, the cloning state every
``checkpoint_steps`` steps), so the next run with the same key continues from there and ends with the same
weights as a build that never stopped.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable

import torch
from tqdm.auto import tqdm

from skillduet_plugin.core.artefacts import building, code_digest, digest_key, read_marker, replace_file
from skillduet_plugin.core.cpu_kernels import cpu_kernels
from skillduet_plugin.core.settings import check
from skillduet_plugin.core.conversation import ChatTokenizer
from skillduet_plugin.warmstart.episodes import (ExpertRecord, SkillPlan, build_cloning_data, clone,
                                                 expert_takes_hint, plan_skill_sections, play_expert)
from skillduet_plugin.warmstart.reading import describe, reading_data

FORMAT_VERSION = 2  # 2: complete-or-absent folders, no wall-clock cap, method-independent key

# The code that decides what the warm-started weights are (cloning data layout, prompts, expert, loss, loop): part
# of the cache key, so an edit of any of them re-clones instead of reusing a model the current code would not make.
WARM_START_CODE = ("skillduet_plugin.warmstart.episodes", "skillduet_plugin.warmstart.cache",
                   "skillduet_plugin.envs.prompts", "skillduet_plugin.envs.alfworld.expert",
                   "skillduet_plugin.envs.alfworld.env", "skillduet_plugin.rollout.choice",
                   "skillduet_plugin.llm.offline", "skillduet_plugin.llm.offline_alfworld",
                   "skillduet_plugin.llm.offline_common", "skillduet_plugin.llm.offline_merge",
                   "skillduet_plugin.core.conversation", "skillduet_plugin.rollout.engine",
                   "skillduet_plugin.skills.inject", "skillduet_plugin.llm.offline_webshop",
                   "skillduet_plugin.envs.webshop.expert", "skillduet_plugin.envs.webshop.actions",
                   "skillduet_plugin.core.logprobs", "skillduet_plugin.rollout.responses",
                   "skillduet_plugin.warmstart.loss", "skillduet_plugin.warmstart.reading",
                   "skillduet_plugin.llm.offline_alfworld_actions")


def warm_start_key(settings: dict[str, Any]) -> dict[str, Any]:
    """Everything the warm-started weights depend on: the settings (base model identity, env and data identity,
    expert, budget in steps, optimiser, episode limits, skill sections, seed), the code that builds and trains
    on the cloning data, the torch version, the torch thread count (a different reduction split may change
    the last bits) and the CPU kernels torch runs (``core.cpu_kernels``: AVX-512 and AVX2 kernels round
    differently). Method-only settings (the RL method, its skill budgets) are not in it: GRPO and SkillDuet
    runs of one setting start from the same model."""

    return {"artefact": "warm-start", "format": FORMAT_VERSION, **settings,
            "code": code_digest(*WARM_START_CODE), "torch": torch.__version__, "threads": torch.get_num_threads(),
            "cpu_kernels": cpu_kernels()}


def cache_key(settings: dict[str, Any]) -> str:
    """The cache folder name (16 hex) of these settings: a digest of :func:`warm_start_key`."""

    return digest_key(warm_start_key(settings))


def model_fingerprint(model_dir: str | Path) -> str:
    """The identity of a base model folder: the digest of its verified artefact marker (a tiny build: every
    file's sha256), else of its config and weight file sizes."""

    folder = Path(model_dir)
    marker = read_marker(folder)
    if marker is not None:
        return hashlib.sha256(json.dumps(marker["files"], sort_keys=True).encode()).hexdigest()
    parts = [(folder / "config.json").read_text()]
    parts += [f"{p.name}:{p.stat().st_size}" for p in sorted(folder.glob("*.safetensors"))]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def cache_settings(base_model_dir: str | Path, *, env_name: str, games: int, expert: str = "search",
                   episodes_per_game: int = 1, steps: int, batch_size: int, learning_rate: float,
                   skill_fraction: float, max_turns: int, max_total_tokens: int, skill_token_budget: int,
                   skill_position: str, seed: int, env_identity: dict[str, Any], design: str = "search",
                   reading: dict[str, Any] | None = None) -> dict[str, Any]:
    """The settings a warm-started model depends on (:func:`warm_start_model`'s, less how it is run: the env
    factory, the cache folder, the log and the worker count), as :func:`cache_key` reads them."""
    return {"model": model_fingerprint(base_model_dir), "env": env_name, "env_identity": env_identity,
            "games": games, "expert": expert, "episodes_per_game": episodes_per_game, "steps": steps,
            "batch_size": batch_size, "learning_rate": learning_rate, "skill_fraction": skill_fraction,
            "max_turns": max_turns, "max_total_tokens": max_total_tokens, "skill_token_budget": skill_token_budget,
            "skill_position": skill_position, "seed": seed, "design": design,
            **({"reading": reading} if design == "reading" else {})}


def warm_start_model(base_model_dir: str | Path, *, make_env: Callable[[int], Any], cache_root: str | Path,
                     log: Callable[[str], None] = print, workers: int = 1, checkpoint_steps: int = 100,
                     **settings_kw: Any) -> tuple[Path, dict[str, Any]]:
    """The warm-started model folder for these settings (:func:`cache_settings`' keywords): built once, then
    reused from ``cache_root``.

    The folder is complete or absent (``artefacts.building``: built beside it, every file's sha256 in its
    marker, fsynced, renamed into place), so a killed warm start is rebuilt, never reused. ``make_env(n)``
    builds the training env limited to its first ``n`` tasks; ``design`` is the cloning data's design
    (``search``, or ``reading`` with ``reading`` = ``{"env_kwargs", "games", "counterfactuals",
    "global_episodes"}`` of its own split: ``warmstart.reading``); ``workers`` processes compute the cloning
    gradients (``warmstart.workers``; the same weights for any count, so it is not in the key).
    ``checkpoint_steps``: how often the cloning state is saved in the build's :class:`BuildProgress` (0: never;
    the expert episodes are kept either way), so that a build killed midway continues there, to the same
    weights (not in the key either). Returns ``(folder, info)``; ``info`` is the stored summary (``cached``
    tells whether it was reused).
    """

    settings = cache_settings(base_model_dir, **settings_kw)
    key = warm_start_key(settings)
    out = Path(cache_root) / "warmstart" / cache_key(settings)
    marker = read_marker(out, key)
    if marker is not None:
        info = {**marker["meta"], "cached": True}
        log(f"warm start: reusing {out} ({info['steps']} cloning steps, loss {info['loss_last']:.3f})")
        return out, info
    check("checkpoint_steps", checkpoint_steps, kind="int", lo=0)
    saved = BuildProgress(out.with_name(out.name + PROGRESS_SUFFIX), key)
    info: dict[str, Any] = {}
    with building(out, key, info) as tmp:
        info.update(_build(tmp, base_model_dir, settings, make_env, log, workers, saved, checkpoint_steps))
    saved.discard()
    return out, {**info, "cached": False}


PROGRESS_SUFFIX = ".progress"


class BuildProgress:
    """What an unfinished warm start has done, kept beside its cache folder (``<key>.progress/``) so that a run
    killed midway continues instead of starting over: ``key.json`` (the full key: a folder of another key is
    discarded), ``expert.json`` (the expert episodes and their skill sections, once played) and ``clone.pt``
    (the newest :func:`~skillduet_plugin.warmstart.episodes.clone_state`). Each file is replaced atomically
    (``artefacts.replace_file``); one that does not read back is logged and ignored, never trusted. The folder
    is deleted once the model is published."""

    def __init__(self, folder: str | Path, key: dict[str, Any]) -> None:
        self.folder = Path(folder)
        self.key = json.loads(json.dumps(key, default=str))
        try:
            same = json.loads((self.folder / "key.json").read_text()) == self.key
        except (OSError, ValueError):
            same = False
        if not same:
            self.discard()

    def _write_key(self) -> None:
        if not (self.folder / "key.json").is_file():
            replace_file(self.folder / "key.json", lambda p: p.write_text(json.dumps(self.key, sort_keys=True)))

    def expert(self) -> tuple[list[ExpertRecord], list[SkillPlan | None]] | None:
        """The saved expert episodes and skill sections, or None."""
        try:
            data = json.loads((self.folder / "expert.json").read_text())
            records = [ExpertRecord(**{**r, "hint": tuple(r["hint"])}) for r in data["records"]]
            plans = [None if p is None else SkillPlan(**p) for p in data["plans"]]
        except (OSError, ValueError, KeyError, TypeError):
            return None  # absent, or not this code's layout: play the expert again
        return records, plans

    def save_expert(self, records: list[ExpertRecord], plans: list[SkillPlan | None]) -> None:
        self._write_key()
        data = {"records": [dataclasses.asdict(r) for r in records],
                "plans": [None if p is None else dataclasses.asdict(p) for p in plans]}
        replace_file(self.folder / "expert.json", lambda p: p.write_text(json.dumps(data)))

    def clone_state(self, log: Callable[[str], None] = print) -> dict[str, Any] | None:
        """The saved cloning state, or None (absent, or not readable: logged)."""
        path = self.folder / "clone.pt"
        if not path.is_file():
            return None
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:  # noqa: BLE001 - any unreadable checkpoint means: clone from the start
            log(f"warm start: ignoring unreadable cloning checkpoint {path} ({type(err).__name__}: {err})")
            return None

    def save_clone_state(self, state: dict[str, Any]) -> None:
        self._write_key()
        replace_file(self.folder / "clone.pt", lambda p: torch.save(state, p))

    def discard(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def _build(folder: Path, base_model_dir: str | Path, settings: dict[str, Any], make_env: Callable[[int], Any],
           log: Callable[[str], None], workers: int = 1, saved: BuildProgress | None = None,
           checkpoint_steps: int = 0) -> dict[str, Any]:
    """Play the expert, lay out and clone its episodes for ``settings["steps"]`` steps; save into ``folder``.
    With ``saved``, the expert episodes and every ``checkpoint_steps``-th cloning state are kept there, and what
    it already holds is continued from."""
    from transformers import AutoModelForCausalLM, AutoTokenizer  # lazy: transformers

    s = settings
    t0 = time.time()
    tokenizer = AutoTokenizer.from_pretrained(base_model_dir)
    chat = ChatTokenizer(tokenizer)
    kept = saved.expert() if saved is not None else None
    if kept is None:
        records, plans = _expert_data(s, make_env, log, workers)
        if saved is not None:
            saved.save_expert(records, plans)
    else:
        records, plans = kept
        log(f"warm start: {len(records)} expert episodes read back from {saved.folder} (played by a stopped build)")
    episodes = build_cloning_data(records, s["env"], chat, max_total_tokens=s["max_total_tokens"], plans=plans,
                                  skill_token_budget=s["skill_token_budget"], skill_position=s["skill_position"])
    build_s = time.time() - t0
    won = sum(ep.won for ep in episodes)
    log(f"warm start: expert episodes laid out in {build_s:.0f}s")
    torch.manual_seed(s["seed"])
    model = AutoModelForCausalLM.from_pretrained(base_model_dir, dtype=torch.float32)
    resume = saved.clone_state(log) if saved is not None else None
    if resume is not None:
        log(f"warm start: continuing the cloning of a stopped build at step {resume['step']} of {s['steps']} "
            f"({saved.folder})")
    done = int(resume["step"]) if resume is not None else 0
    progress = _progress(s["steps"], "warm start (behaviour cloning)", initial=done)
    estimate = _Estimate(s["steps"], log, workers, first=done + 1)

    def on_step(k: int, loss: float) -> None:
        progress.update(1)
        progress.set_postfix(loss=f"{loss:.3f}")
        estimate.step(k)

    try:
        stats = clone(model, episodes, steps=s["steps"], batch_size=s["batch_size"],
                      learning_rate=s["learning_rate"], seed=s["seed"], pad_token_id=chat.pad_token_id,
                      workers=workers, model_dir=base_model_dir, on_step=on_step, resume=resume,
                      checkpoint_every=checkpoint_steps if saved is not None else 0,
                      on_checkpoint=saved.save_clone_state if saved is not None else None)
    finally:
        progress.close()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    info = {**stats, "episodes": len(episodes), "expert_won": won, "build_seconds": round(build_s, 2),
            "settings": settings}
    (folder / "warmstart.json").write_text(json.dumps(info, indent=2, default=str))
    return info


def _expert_data(s: dict[str, Any], make_env: Callable[[int], Any], log: Callable[[str], None],
                 workers: int = 1) -> tuple[list[ExpertRecord], list[SkillPlan | None]]:
    """The expert records of the warm start and the skill section of each (``design``: search or reading, whose
    games ``workers`` processes play)."""
    if s["design"] == "reading":
        eps = reading_data(s, make_env, workers)
        log(f"warm start: {describe(eps)} within {s['max_turns']} turns")
        return [e.record for e in eps], [e.plan for e in eps]
    env = make_env(s["games"])
    label = f"{s['expert']} expert" if callable(getattr(env, "searching_expert", None)) else "scripted expert"
    try:
        records = [play_expert(env, t, max_turns=s["max_turns"], kind=s["expert"], seed=k)
                   for t in list(env.tasks)[:s["games"]] for k in range(s["episodes_per_game"])]
        plans = plan_skill_sections(records, s["env"], skill_fraction=s["skill_fraction"],
                                    skill_token_budget=s["skill_token_budget"], seed=s["seed"])
        if expert_takes_hint(s["env"]):  # an episode with a Local skill is played as that skill says
            records = [play_expert(env, rec.task_id, max_turns=s["max_turns"], kind=s["expert"], seed=rec.seed,
                                   hint=records[plan.donor].actions)
                       if plan is not None and plan.kind == "local" else rec for rec, plan in zip(records, plans)]
    finally:
        env.close()
    won = sum(rec.won for rec in records)
    local = [records[p.donor].task_id == rec.task_id for rec, p in zip(records, plans) if p and p.kind == "local"]
    log(f"warm start: {len(records)} {label} episodes ({won} won within {s['max_turns']} turns; with a Local "
        f"skill: {sum(local)} from their game, {len(local) - sum(local)} from another game of the type; "
        f"{sum(p is not None for p in plans) - len(local)} with a Global)")
    return records, plans


class _Estimate:
    """Logs, after the first few steps, how long the whole budget will take at the rate measured so far (with
    the load average, since a busy machine is slower but trains the same steps). Timed from the end of the
    first step, so the workers' start-up does not count as a step."""

    def __init__(self, total: int, log: Callable[[str], None], workers: int = 1, probe: int = 5,
                 first: int = 1) -> None:
        self.total, self.log, self.workers, self.first = total, log, workers, first
        self.probe = min(probe, total - first)
        self.t0 = time.time()

    def step(self, k: int) -> None:
        if k == self.first:
            self.t0 = time.time()
        if k != self.first + self.probe or self.probe < 1:
            return
        per_step = (time.time() - self.t0) / self.probe
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        left = self.total - self.first + 1
        self.log(f"warm start: {left} cloning steps{' left' if self.first > 1 else ''}, about "
                 f"{per_step * left / 60:.1f} min at "
                 f"{per_step:.2f} s/step, {self.workers} process{'es' if self.workers > 1 else ''} (load average "
                 f"{load:.1f}); the steps, not the time, set the model")


def _progress(total: int, desc: str, initial: int = 0):

    return tqdm(total=total, desc=desc, unit="step", leave=False, dynamic_ncols=True, initial=initial)
