"""The skill bank inside verl's checkpoints: a snapshot in each ``global_step_<k>/skillduet/`` folder beside verl's
own state (saved before the step's consolidation and again after it, with a state file saying which), restored
when verl resumes; a fresh start refuses a lost bank next to its checkpoints (``SkillDuetTrainer`` mixes this in;
it holds ``config``, ``lifecycle``, ``global_steps`` and ``_scopes``)."""

from __future__ import annotations

import json
import logging
import os

logger = logging.getLogger(__name__)

#: the folder of a verl checkpoint that holds the skill bank and the state file
CHECKPOINT_SUBDIR = "skillduet"
STATE_FILE = "verl_state.json"


class SkillBankCheckpoints:
    """Checkpoint hooks of the SkillDuet verl trainer (``_save_checkpoint`` / ``_load_checkpoint`` around verl's)."""

    def _load_checkpoint(self):
        result = super()._load_checkpoint()
        self._ensure_lifecycle()
        if self.global_steps > 0:
            self._restore_skill_bank(self._resumed_folder())
        elif hasattr(getattr(self.lifecycle, "bank", None), "check_not_lost"):
            # a fresh start: a lost bank next to the checkpoints of its history is an error, not a new bank
            self.lifecycle.bank.check_not_lost(self.config.trainer.default_local_dir,
                                               resume="trainer.resume_mode=auto (or resume_path)")
        return result

    def _resumed_folder(self) -> str:
        trainer = self.config.trainer
        if trainer.resume_mode == "resume_path":
            return os.path.abspath(trainer.resume_from_path)
        return os.path.abspath(os.path.join(trainer.default_local_dir, f"global_step_{self.global_steps}"))

    def _save_checkpoint(self):
        result = super()._save_checkpoint()
        folder = os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}")
        # Saved now (pre-consolidation) and again after on_step_end's consolidation, so a crash in between
        # still resumes consistently: the state file says whether this step's end_step has run.
        self._snapshot_skill_bank(folder, end_step_done=False)
        self._checkpoint_folder = folder
        return result

    def _snapshot_skill_bank(self, folder: str, *, end_step_done: bool) -> None:
        target = os.path.join(folder, CHECKPOINT_SUBDIR)
        os.makedirs(target, exist_ok=True)
        self.lifecycle.snapshot(os.path.join(target, "bank"))
        state = {"global_steps": int(self.global_steps), "end_step_done": end_step_done,
                 "scopes": sorted(self._scopes)}
        tmp = os.path.join(target, STATE_FILE + ".tmp")
        with open(tmp, "w") as f:
            json.dump(state, f)
        os.replace(tmp, os.path.join(target, STATE_FILE))

    def _restore_skill_bank(self, folder: str) -> None:
        target = os.path.join(folder, CHECKPOINT_SUBDIR)
        state_path = os.path.join(target, STATE_FILE)
        if not os.path.exists(state_path):
            raise FileNotFoundError(f"{folder} has no SkillDuet skill bank ({state_path} is missing): it was not "
                                    "written by the skillduet_sync trainer; resume from a SkillDuet checkpoint or "
                                    "set trainer.resume_mode=disable")
        with open(state_path) as f:
            state = json.load(f)
        self.lifecycle.restore(os.path.join(target, "bank"))
        self._scopes = set(state.get("scopes", []))
        if not state.get("end_step_done", True):
            self.lifecycle.end_step(int(state["global_steps"]))
        logger.info("skillduet: restored the skill bank of step %s from %s", state["global_steps"], target)
