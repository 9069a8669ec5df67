"""``SkillDuetCallback``: keeps the skill bank in step with training (consolidation, checkpoints, shutdown).

Registered by the trainer itself. After every optimizer step the main process runs ``lifecycle.end_step``
(a consolidation every ``consolidation_interval`` steps) and all processes wait for it, so every rank rolls out
the next step with the same Global version. Each checkpoint gets a snapshot of the bank in
``<checkpoint>/skillduet/``; resuming from that checkpoint restores it (``SkillDuetMixin.train``).
"""

from __future__ import annotations

import os
from typing import Any

from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

#: folder inside a checkpoint that holds the skill bank snapshot
SNAPSHOT_DIRNAME = "skillduet"


class SkillDuetCallback(TrainerCallback):
    """Calls the trainer's skill-bank hooks; the trainer is passed in because callbacks do not receive it."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer

    def on_step_end(self, args, state, control, **kwargs):
        self.trainer.skillduet_end_step(state.global_step)
        return control

    def on_save(self, args, state, control, **kwargs):
        run_dir = self.trainer._get_output_dir(trial=None)
        self.trainer.skillduet_snapshot(os.path.join(run_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"))
        return control

    def on_train_end(self, args, state, control, **kwargs):
        pool = getattr(self.trainer, "_env_pool", None)
        if pool is not None and hasattr(pool, "close"):
            pool.close()
        return control
