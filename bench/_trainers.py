"""Build SkillDuet / plain-GRPO trainers on the tiny model and drive them one optimizer step at a time, with
per-phase timers, so two configurations can be stepped alternately (A B A B ...) in one process."""

from __future__ import annotations

import statistics

import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

from bench import _synthetic

# (phase, trainer method wrapped by a timer; "lifecycle.x" = a method of the trainer's lifecycle). Instance
# attributes shadow the class methods. Each phase is timed once: nested calls are not double counted because
# the outer wrappers below (skillduet_end_step) are not phases themselves.
PHASE_METHODS = (
    ("rollout", "_skillduet_rollout"),       # multi-turn play: generation + environment
    ("extraction", "_extract"),              # analyzer calls (offline analyzer here)
    ("base_logps", "_base_logps"),           # old log-probs for scoring when TRL did not keep them
    ("scoring", "_score"),                   # Strength: extra forwards at rollout time (all of it when pairwise)
    ("scoring", "_finish_scores"),           # Strength from the captured teacher/loss rows (heldout=teacher)
    ("teacher", "_teacher_logps"),           # OPD teacher forward under the Local skill
    ("loss", "compute_loss"),                # TRL loss forward (+ OPD term)
    ("consolidation", "lifecycle.end_step"),  # dedupe/select/synthesize every consolidation_interval steps
)


class PhaseTimer:
    """Accumulates wall seconds per phase for the current step."""

    def __init__(self) -> None:
        self.current: dict[str, float] = defaultdict(float)

    def wrap(self, name: str, fn: Callable) -> Callable:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.current[name] += time.perf_counter() - start

        return timed

    def take(self) -> dict[str, float]:
        out, self.current = dict(self.current), defaultdict(float)
        return out


def make_trainer(out_dir: Path, method: str, *, size: str = "tiny", env: str = "alfworld", episodes: int = 8,
                 group: int = 4, max_turns: int = 3, tokens_per_turn: int = 16, max_completion_length: int = 256,
                 consolidation_interval: int = 10, seed: int = 0, extra: dict | None = None,
                 skillduet_overrides: dict | None = None):
    """A SkillDuetGRPOTrainer (``method`` = a ``config.preset`` name; ``grpo`` is plain GRPO) on the tiny model,
    ``episodes`` rollouts per step in groups of ``group``, environments in-process, offline analyzer."""
    import torch

    from skillduet_plugin.config import preset
    from skillduet_plugin.integrations.trl import CPU_SAFE_DEFAULTS, SkillDuetGRPOConfig, SkillDuetGRPOTrainer

    skillduet = preset(method, consolidation_interval=consolidation_interval, **(skillduet_overrides or {})).to_dict()
    env_kwargs = {"max_steps": 50} if env == "alfworld" else {}
    values = {**CPU_SAFE_DEFAULTS, "output_dir": str(out_dir), "num_generations": group,
              "per_device_train_batch_size": episodes, "max_completion_length": max_completion_length,
              "max_steps": 1000, "env_name": env, "env_kwargs": env_kwargs, "env_workers": 0,
              "max_turns": max_turns, "max_new_tokens_per_turn": tokens_per_turn, "save_strategy": "no",
              "seed": seed, "learning_rate": 1e-4, "disable_tqdm": True, "logging_steps": 10**6,
              "skillduet": skillduet}
    values.update(extra or {})
    torch.manual_seed(seed)
    args = SkillDuetGRPOConfig(**values)
    return SkillDuetGRPOTrainer(model=str(_synthetic.tiny_model_dir(size)), args=args)


class Stepper:
    """One full optimizer step per call: rollout + scoring + TRL loss/backward + optimizer + end-of-step."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.timer = PhaseTimer()
        self.prompt_tokens: list[float] = []  # per rollout: mean tokens of the episodes' first prompts
        self.episode_tokens: list[float] = []  # per rollout: mean tokens of first prompt + completion (all turns)
        for phase, name in PHASE_METHODS:
            owner, _, attr = name.rpartition(".")
            obj = getattr(trainer, owner, None) if owner else trainer
            if obj is not None and hasattr(obj, attr):
                setattr(obj, attr, self.timer.wrap(phase, getattr(obj, attr)))
        # TRL keeps the rollout function it was given at construction; time that reference too.
        if getattr(trainer, "rollout_func", None) is not None:
            trainer.rollout_func = self.timer.wrap("rollout", self._recording(trainer.rollout_func))
            trainer._skillduet_rollout = getattr(type(trainer), "_skillduet_rollout").__get__(trainer)
        trainer.create_optimizer_and_scheduler(num_training_steps=trainer.args.max_steps)
        trainer.current_gradient_accumulation_steps = 1
        self._loader = trainer.get_train_dataloader()
        self._batches = iter(self._loader)
        trainer.model.train()

    def _recording(self, rollout_func: Callable) -> Callable:
        """``rollout_func`` that also keeps each step's mean first-prompt and whole-episode token counts."""
        def recorded(*args: Any, **kwargs: Any) -> Any:
            out = rollout_func(*args, **kwargs)
            prompts, completions = out.get("prompt_ids") or [], out.get("completion_ids") or []
            if prompts:
                self.prompt_tokens.append(statistics.mean(len(p) for p in prompts))
                self.episode_tokens.append(statistics.mean(len(p) + len(c) for p, c in zip(prompts, completions)))
            return out

        return recorded

    def _next_batch(self) -> Any:
        try:
            return next(self._batches)
        except StopIteration:
            self._batches = iter(self._loader)
            return next(self._batches)

    def step(self) -> dict[str, float]:
        """Run one optimizer step; returns ``{"total": s, <phase>: s, ...}`` of this step."""
        t = self.trainer
        batch = self._next_batch()
        start = time.perf_counter()
        t.training_step(t.model, batch, None)
        t.optimizer.step()
        t.lr_scheduler.step()
        t.model.zero_grad(set_to_none=True)
        t.state.global_step += 1
        if hasattr(t, "skillduet_end_step"):
            t.skillduet_end_step(t.state.global_step)
        total = time.perf_counter() - start
        phases = self.timer.take()
        phases["total"] = total
        return phases


def warm_env_caches(env: str = "alfworld", env_kwargs: dict | None = None) -> int:
    """Reset every training task once (untimed), so the process-wide engine caches hold every game.

    ALFWorld's engine memoises each game's parse per process (``envs.alfworld.engine``): a game's first reset
    costs ~0.14 s on this machine, a later one ~0.01 s, whichever trainer makes it. Trainers stepped alternately
    in one process play the same tasks at each step (same seed), so without this the configuration that runs
    first in a round pays every cold load and the others none. Returns the number of tasks reset.
    """
    from skillduet_plugin.envs import make

    kwargs = dict(env_kwargs if env_kwargs is not None else ({"max_steps": 50} if env == "alfworld" else {}))
    with make(env, split="train", **kwargs) as handle:
        tasks = list(handle.tasks)
        for task in tasks:
            handle.reset(task)
    return len(tasks)


def close_lifecycles(steppers: dict[str, "Stepper"]) -> None:
    """Close every stepper's skill lifecycle (its SQLite bank) before the temporary folder goes."""
    for stepper in steppers.values():
        lifecycle = getattr(stepper.trainer, "lifecycle", None)
        if lifecycle is not None and hasattr(lifecycle, "close"):
            lifecycle.close()


def median_breakdown(rounds: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Per configuration, the median step and the median of each phase (``<phase>_s``), the median of the step
    without its rollout (``excl_rollout_s``) and of what no phase covers (``backward_and_rest_s``)."""
    phases = sorted({k for rs in rounds.values() for r in rs for k in r} - {"total"})
    out = {}
    for name, rs in rounds.items():
        row = {"total_s": statistics.median(r["total"] for r in rs)}
        row.update({f"{p}_s": statistics.median(r.get(p, 0.0) for r in rs) for p in phases})
        row["excl_rollout_s"] = statistics.median(r["total"] - r.get("rollout", 0.0) for r in rs)
        # what no phase wrapper times: the backward pass, the optimizer step and TRL's batch bookkeeping
        row["backward_and_rest_s"] = statistics.median(r["total"] - sum(r.get(p, 0.0) for p in phases) for r in rs)
        out[name] = row
    return out


def alternate(steppers: dict[str, "Stepper"], warmup: int, repeats: int) -> dict[str, list[dict[str, float]]]:
    """Step every configuration once per round, ``warmup`` untimed rounds then ``repeats`` timed ones; the order
    rotates by one each round (A B C, B C A, C A B, ...) so no configuration is always the first to meet the
    round's new work (parse caches of new actions, allocator growth). Returns each one's per-step phases."""
    names = list(steppers)
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    for rnd in range(warmup + repeats):
        shift = rnd % len(names)
        for name in names[shift:] + names[:shift]:
            phases = steppers[name].step()
            if rnd >= warmup:
                rounds[name].append(phases)
    return rounds


def single_turn_prompts(n: int, seed: int = 0) -> list[list[dict[str, str]]]:
    """The first prompts of ``n`` generated ALFWorld games (the same text SkillDuet's episodes start from)."""
    from skillduet_plugin.envs import make
    from skillduet_plugin.envs.prompts import initial_messages

    prompts = []
    with make("alfworld", split="train") as env:
        tasks = list(env.tasks)
        stride = max(1, len(tasks) // n)
        for i in range(n):
            obs, info = env.reset(tasks[(i * stride + seed) % len(tasks)])
            prompts.append(initial_messages("alfworld", task=info["task"], observation=obs,
                                            admissible_actions=info["admissible_actions"]))
    return prompts


def coin_reward(completions: list, **_: Any) -> list[float]:
    """A deterministic pseudo-random 0/1 reward of the completion text (stable across processes), so groups
    hold successes and failures and SDPO finds demonstrations, whatever the untrained model writes."""
    import hashlib

    out = []
    for c in completions:
        text = c[-1]["content"] if isinstance(c, list) else str(c)
        out.append(float(hashlib.sha256(text.encode()).digest()[0] % 2))
    return out


def make_trl_trainer(out_dir: Path, kind: str, prompts: list, *, size: str = "tiny", episodes: int = 8,
                     group: int = 4, max_completion_length: int = 48, seed: int = 0):
    """TRL's own single-turn trainers on the same prompts, batch and reward: ``grpo`` (``GRPOTrainer``) or
    ``sdpo`` (``trl.experimental.sdpo.SDPOTrainer``: successful rollouts of a group as the teacher context)."""
    import torch
    from datasets import Dataset

    from skillduet_plugin.integrations.trl import CPU_SAFE_DEFAULTS

    common = {**CPU_SAFE_DEFAULTS, "output_dir": str(out_dir), "num_generations": group,
              "per_device_train_batch_size": episodes, "max_completion_length": max_completion_length,
              "max_steps": 1000, "save_strategy": "no", "seed": seed, "learning_rate": 1e-4,
              "disable_tqdm": True, "logging_steps": 10**6}
    dataset = Dataset.from_list([{"prompt": p} for p in prompts])
    model = str(_synthetic.tiny_model_dir(size))
    torch.manual_seed(seed)
    if kind == "grpo":
        from trl import GRPOConfig, GRPOTrainer

        return GRPOTrainer(model=model, reward_funcs=[coin_reward], args=GRPOConfig(**common),
                           train_dataset=dataset)
    if kind == "sdpo":
        from trl.experimental.sdpo import SDPOConfig, SDPOTrainer

        return SDPOTrainer(model=model, reward_funcs=[coin_reward], args=SDPOConfig(**common),
                           train_dataset=dataset)
    raise ValueError(f"kind={kind!r} is invalid: allowed values are grpo, sdpo")
