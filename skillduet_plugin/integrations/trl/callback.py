"""``SkillDuetCallback``: keeps the skill bank in step with training (consolidation, checkpoints, shutdown).

Registered by the trainer itself. After every optimizer step the main process runs ``lifecycle.end_step``
(a consolidation every ``consolidation_interval`` steps) and all processes wait for it, so every rank rolls out
the next step with the same Global version. Each checkpoint gets a snapshot of the bank in
``<checkpoint>/skillduet/``; resuming from that checkpoint restores it (``SkillDuetMixin.train``). At the start
of training the skills are connected to the trainer's reporting callbacks (``report_to``: TensorBoard, W&B).
"""

from __future__ import annotations

import os
from typing import Any

from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from skillduet_plugin.integrations.trl.tracking import tracker_from_callbacks
from skillduet_plugin.skills.tracking import SkillTracker

#: folder inside a checkpoint that holds the skill bank snapshot
SNAPSHOT_DIRNAME = "skillduet"


class SkillDuetCallback(TrainerCallback):
    """Calls the trainer's skill-bank hooks; the trainer is passed in because callbacks do not receive it."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer

    def on_train_begin(self, args, state, control, **kwargs):
        # The reporting callbacks made their writers in their own on_train_begin, which runs before ours.
        lifecycle = getattr(self.trainer, "lifecycle", None)
        if lifecycle is not None and state.is_world_process_zero:
            lifecycle.tracker = tracker_from_callbacks(self.trainer.callback_handler.callbacks)
        return control

    def on_step_end(self, args, state, control, **kwargs):
        self.trainer.skillduet_end_step(state.global_step)
        return control

    def on_save(self, args, state, control, **kwargs):
        run_dir = self.trainer._get_output_dir(trial=None)
        self.trainer.skillduet_snapshot(os.path.join(run_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"))
        return control

    def on_train_end(self, args, state, control, **kwargs):
        lifecycle = getattr(self.trainer, "lifecycle", None)
        if lifecycle is not None and hasattr(lifecycle, "tracker"):  # the callbacks close their writers now
            lifecycle.tracker = SkillTracker()
        pool = getattr(self.trainer, "_env_pool", None)
        if pool is not None and hasattr(pool, "close"):
            pool.close()
        return control
