"""Build SkillDuet / plain-GRPO trainers on the tiny model and drive them one optimizer step at a time, with
per-phase timers, so two configurations can be stepped alternately (A B A B ...) in one process."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

from bench import _synthetic

# phase -> trainer method wrapped by a timer (instance attributes shadow the class methods)
PHASE_METHODS = {
    "rollout": "_skillduet_rollout",       # multi-turn play: generation + environment
    "extraction": "_extract",              # analyzer calls (offline analyzer here)
    "base_logps": "_base_logps",           # old log-probs for scoring when TRL did not keep them
    "scoring": "_score",                   # Strength/Utility/Contrast of the new Local skills
    "teacher": "_teacher_logps",           # OPD teacher forward under the Local skill
    "loss": "compute_loss",                # TRL loss forward (+ OPD term)
    "consolidation": "skillduet_end_step",  # dedupe/select/synthesize every consolidation_interval steps
}


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
                 consolidation_interval: int = 10, seed: int = 0, extra: dict | None = None):
    """A SkillDuetGRPOTrainer (``method`` = a ``config.preset`` name; ``grpo`` is plain GRPO) on the tiny model,
    ``episodes`` rollouts per step in groups of ``group``, environments in-process, offline analyzer."""
    import torch

    from skillduet_plugin.config import preset
    from skillduet_plugin.integrations.trl import CPU_SAFE_DEFAULTS, SkillDuetGRPOConfig, SkillDuetGRPOTrainer

    skillduet = preset(method, consolidation_interval=consolidation_interval).to_dict()
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
        for phase, name in PHASE_METHODS.items():
            if hasattr(trainer, name):
                setattr(trainer, name, self.timer.wrap(phase, getattr(trainer, name)))
        # TRL keeps the rollout function it was given at construction; time that reference too.
        if getattr(trainer, "rollout_func", None) is not None:
            trainer.rollout_func = self.timer.wrap("rollout", trainer.rollout_func)
            trainer._skillduet_rollout = getattr(type(trainer), "_skillduet_rollout").__get__(trainer)
        trainer.create_optimizer_and_scheduler(num_training_steps=trainer.args.max_steps)
        trainer.current_gradient_accumulation_steps = 1
        self._loader = trainer.get_train_dataloader()
        self._batches = iter(self._loader)
        trainer.model.train()

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
