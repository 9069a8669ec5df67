"""SkillDuet as a verl 0.9 plugin: entry point, ``skillduet_sync`` trainer, ``skillduet_agent`` loop, engine loss.

Nothing heavy is imported here: verl imports the entry point (:mod:`.plugin`) in every process, and the trainer
and agent loop modules are imported only when verl itself imports the matching subsystem.
"""

TRAINER_NAME = "skillduet_sync"
AGENT_LOOP_NAME = "skillduet_agent"
PLUGIN_NAME = "skillduet"
#: key of the per-trajectory record the agent loop puts in ``AgentLoopOutput.extra_fields``
EXTRA_KEY = "skillduet"

__all__ = ["AGENT_LOOP_NAME", "EXTRA_KEY", "PLUGIN_NAME", "TRAINER_NAME"]
