"""The training-time recorder: one ``metrics.jsonl`` line per optimizer step and a progress bar with the step,
the rollout success rate and the Global's size.

Per-task-type success and the Global size are read from the trainer after each step (the rollout's episodes,
the lifecycle's bank, after that step's consolidation); everything TRL logs for the step (reward, ``opd/*``
gate statistics, ``skills/*``, loss, ...) is merged into the same record.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from tqdm.auto import tqdm
from transformers import TrainerCallback

from skillduet_plugin.runs.rundir import MetricsWriter
from skillduet_plugin.skills.trajectory_io import save_trajectories, trajectory_file

# Keys of TRL's end-of-training log; they go into a separate "train_end" record.
_END_KEYS = ("train_runtime", "train_samples_per_second", "train_steps_per_second", "train_loss")


def rollout_metrics(episodes: list[Any]) -> dict[str, float]:
    """``success``, ``success/<task type>``, ``env_reward``, ``turns`` of one step's episodes."""
    if not episodes:
        return {}
    by_type: dict[str, list[float]] = {}
    for ep in episodes:
        by_type.setdefault(str(ep.scope), []).append(float(bool(ep.won)))
    out = {"success": sum(float(bool(ep.won)) for ep in episodes) / len(episodes),
           "env_reward": sum(float(ep.reward) for ep in episodes) / len(episodes),
           "turns": sum(ep.num_turns for ep in episodes) / len(episodes)}
    out.update({f"success/{t}": sum(v) / len(v) for t, v in sorted(by_type.items())})
    return out


def global_metrics(lifecycle: Any) -> dict[str, float]:
    """Size of the Global in force: scopes with a version, total items and tokens, newest version number."""
    if lifecycle is None:
        return {"global/scopes": 0.0, "global/items": 0.0, "global/tokens": 0.0, "global/version_max": 0.0}
    summary = lifecycle.global_summary()
    return {f"global/{key}": value for key, value in summary.items()}


class RunRecorder(TrainerCallback):
    """Writes step records and drives the progress bar (register it after the trainer's own callbacks, so
    the step's consolidation has happened when it reads the bank)."""

    def __init__(self, trainer: Any, writer: MetricsWriter, config: Any, log: Callable[[str], None]) -> None:
        self.trainer = trainer
        self.writer = writer
        self.log = log
        self.total = int(config.steps)
        self.bar: Any = None
        self.pending: dict[str, Any] = {}
        self.t_train = time.time()
        self.t_step = time.time()
        self.last_record: dict[str, Any] = {}

    def on_train_begin(self, args, state, control, **kwargs):

        self.t_train = time.time()
        self.bar = tqdm(total=self.total, desc="SkillDuet RL", unit="step", dynamic_ncols=True)
        return control

    def on_step_begin(self, args, state, control, **kwargs):
        self.t_step = time.time()
        return control

    def on_step_end(self, args, state, control, **kwargs):
        trainer = self.trainer
        episodes = (getattr(trainer, "last_rollout", None) or {}).get("episodes") or getattr(trainer, "_episodes", [])
        record: dict[str, Any] = {"step": int(state.global_step)}
        record.update(rollout_metrics(list(episodes)))
        record.update(global_metrics(getattr(trainer, "lifecycle", None)))
        record["time/step_s"] = time.time() - self.t_step
        record["time/elapsed_s"] = time.time() - self.t_train
        self.pending = record
        self._save_trajectories(int(state.global_step))
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(success=f"{record.get('success', 0.0):.2f}",
                                 global_items=int(record["global/items"]), refresh=True)
        return control

    def _save_trajectories(self, step: int) -> None:
        """The step's trajectories (tokens, base log-probs, actions) for offline re-scoring (``skillduet score``)."""

        trajectories = (getattr(self.trainer, "last_rollout", None) or {}).get("trajectories") or []
        accelerator = getattr(self.trainer, "accelerator", None)
        if trajectories and (accelerator is None or accelerator.is_main_process):
            save_trajectories(trajectory_file(self.writer.path.parent, step), trajectories)

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = dict(logs or {})
        if any(k in logs for k in _END_KEYS):
            self.writer.write({"event": "train_end", "step": int(state.global_step), **logs})
            return control
        record = dict(self.pending) if self.pending.get("step") == state.global_step else {"step": state.global_step}
        for key, value in logs.items():
            if isinstance(value, (int, float)) and key not in record:
                record[key] = value
        self.last_record = self.writer.write(record)
        self.pending = {}
        return control

    def on_train_end(self, args, state, control, **kwargs):
        self.close()
        return control

    def close(self) -> None:
        if self.pending:  # a step whose log never came (logging disabled): keep its record anyway
            self.last_record = self.writer.write(self.pending)
            self.pending = {}
        if self.bar is not None:
            self.bar.close()
            self.bar = None
