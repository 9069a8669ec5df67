"""The skill bank across a TRL run's steps and checkpoints: consolidation after each optimizer step on the main
process, the bank's snapshot beside each checkpoint and its restore on resume, every process reloading what the
main one wrote (``SkillDuetMixin`` mixes this in; it holds ``lifecycle``, ``skillduet`` and ``accelerator``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from transformers.trainer_utils import get_last_checkpoint

from skillduet_plugin.integrations.trl.callback import SNAPSHOT_DIRNAME


class SkillBankSteps:
    """The bank's part of a SkillDuet TRL trainer."""

    def skillduet_end_step(self, step: int) -> None:
        """After each optimizer step: consolidation on the main process, then every process sees the result.

        Without the Global (Local-only) nothing is consolidated: no synthesizer call for a Global nobody reads.
        """
        if self.lifecycle is None or not self.skillduet.use_global:
            return
        self._finish_scores()
        if self.accelerator.is_main_process:
            self.lifecycle.end_step(step)
        self._sync_bank()

    def skillduet_snapshot(self, checkpoint_dir: str | os.PathLike) -> None:
        if self.lifecycle is not None and self.accelerator.is_main_process:
            self.lifecycle.snapshot(Path(checkpoint_dir) / SNAPSHOT_DIRNAME)
        self.accelerator.wait_for_everyone()

    def skillduet_restore(self, checkpoint_dir: str | os.PathLike) -> None:
        """Restore the bank saved with ``checkpoint_dir`` (the Global and candidates of that step)."""
        if self.lifecycle is None:
            return
        source = Path(checkpoint_dir) / SNAPSHOT_DIRNAME
        if not source.is_dir():
            raise FileNotFoundError(f"{checkpoint_dir} has no {SNAPSHOT_DIRNAME}/ skill bank snapshot: resuming "
                                    "without it would pair the model of that step with a different Global")
        if self.accelerator.is_main_process:
            self.lifecycle.restore(source)
        self._sync_bank()

    def _sync_bank(self) -> None:
        self.accelerator.wait_for_everyone()
        if not self.accelerator.is_main_process and hasattr(self.lifecycle, "reload"):
            self.lifecycle.reload()

    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any):
        checkpoint = resume_from_checkpoint
        if checkpoint is True:
            checkpoint = get_last_checkpoint(self.args.output_dir)
        if checkpoint:
            self.skillduet_restore(checkpoint)
        elif self.accelerator.is_main_process and hasattr(getattr(self.lifecycle, "bank", None), "check_not_lost"):
            # a lost bank next to the checkpoints of its history is an error, not a fresh start
            self.lifecycle.bank.check_not_lost(self.args.output_dir)
        return super().train(resume_from_checkpoint, *args, **kwargs)
