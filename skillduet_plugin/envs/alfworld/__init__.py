"""ALFWorld on the real TextWorld engine: the ``TextEnv`` adapter, task types and our own game generator.

``make_alfworld(data_dir=None, split="train")`` is what ``skillduet_plugin.envs.make("alfworld", ...)`` calls.
"""

from skillduet_plugin.envs.alfworld.env import AlfworldEnv, extract_task, make_alfworld
from skillduet_plugin.envs.alfworld.generator import default_data_root, ensure_default_data, generate_games
from skillduet_plugin.envs.alfworld.tasks import SCOPES, SPLITS, TASK_TYPES, discover_tasks, task_type_of


__all__ = ["AlfworldEnv", "SCOPES", "SPLITS", "TASK_TYPES", "default_data_root", "discover_tasks",
           "ensure_default_data", "extract_task", "generate_games", "make_alfworld", "task_type_of"]
