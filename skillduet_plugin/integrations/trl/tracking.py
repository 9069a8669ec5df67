"""The skills in TRL's own trackers: ``report_to=["tensorboard", "wandb"]`` through the writers of the
trainer's ``TensorBoardCallback`` and ``WandbCallback`` (made by transformers at ``on_train_begin``), never a
client of our own."""

from __future__ import annotations

import logging
from typing import Any

from skillduet_plugin.skills.tracking import SkillTracker, TrackerBridge
from skillduet_plugin.skills.tracking_writers import TensorBoardWriter, WandbWriter

logger = logging.getLogger(__name__)


def tracker_from_callbacks(callbacks: Any) -> SkillTracker:
    """A bridge to the reporting callbacks among ``callbacks`` (the trainer's ``callback_handler.callbacks``)
    that have a live writer; the no-op tracker when there is none."""
    writers: list[Any] = []
    for cb in callbacks:
        name = type(cb).__name__
        if name == "TensorBoardCallback" and getattr(cb, "tb_writer", None) is not None:
            writers.append(TensorBoardWriter(cb.tb_writer))
        elif name == "WandbCallback" and getattr(cb, "_wandb", None) is not None and cb._wandb.run is not None:
            # TRL lets W&B count steps and logs the trainer's step as train/global_step: so do we.
            writers.append(WandbWriter(cb._wandb, step_key="train/global_step"))
    if not writers:
        return SkillTracker()
    logger.info("skillduet: skills logged to %s", ", ".join(type(w).__name__ for w in writers))
    return TrackerBridge(writers)
