"""The skills in verl's own loggers: ``trainer.logger=[console,tensorboard,wandb]`` through the ``Tracking``
object verl's trainer made in ``fit()`` (its TensorBoard ``SummaryWriter``, the ``wandb`` module it logs with,
its console), never a client of our own."""

from __future__ import annotations

import logging
from typing import Any

from skillduet_plugin.skills.tracking import SkillTracker, TrackerBridge
from skillduet_plugin.skills.tracking_writers import ConsoleWriter, TensorBoardWriter, WandbWriter

logger = logging.getLogger(__name__)


def tracker_from_verl(tracking: Any) -> SkillTracker:
    """A bridge to the backends of ``verl.utils.tracking.Tracking`` that can show text (others are skipped:
    they keep receiving the scalars as before); the no-op tracker when none can."""
    backends = dict(getattr(tracking, "logger", None) or {})
    writers: list[Any] = []
    if "tensorboard" in backends and hasattr(backends["tensorboard"], "writer"):
        writers.append(TensorBoardWriter(backends["tensorboard"].writer))
    if "wandb" in backends:
        writers.append(WandbWriter(backends["wandb"]))
    if "console" in backends:
        writers.append(ConsoleWriter())
    if not writers:
        return SkillTracker()
    logger.info("skillduet: skills logged to %s", ", ".join(type(w).__name__ for w in writers))
    return TrackerBridge(writers)
