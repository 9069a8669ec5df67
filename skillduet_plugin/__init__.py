"""skillduet: model-skill co-evolution (SkillDuet) as a plugin for verl and TRL trainers.

Import what you need from the subpackages; this top level stays light (no torch import) so that
``import skillduet_plugin`` is cheap in every Ray worker.
"""

from skillduet_plugin.config import BackendConfig, ConfigError, SkillDuetConfig, preset

__version__ = "0.1.0"

__all__ = ["BackendConfig", "ConfigError", "SkillDuetConfig", "preset", "__version__"]
