"""SkillDuet for TRL 1.16: ``SkillDuetGRPOTrainer`` (a thin mixin over ``GRPOTrainer``) and its config.

    from skillduet_plugin.integrations.trl import SkillDuetGRPOConfig, SkillDuetGRPOTrainer, task_dataset
    args = SkillDuetGRPOConfig(output_dir="runs/x", env_name="alfworld", skillduet={"opd_coef": 0.1}, ...)
    SkillDuetGRPOTrainer(model="path/to/model", args=args, train_dataset=task_dataset(env)).train()
"""

from skillduet_plugin.integrations.trl.callback import SNAPSHOT_DIRNAME, SkillDuetCallback
from skillduet_plugin.integrations.trl.config import CPU_SAFE_DEFAULTS, SkillDuetGRPOConfig
from skillduet_plugin.integrations.trl.data import make_env_reward, task_dataset
from skillduet_plugin.integrations.trl.trainer import SkillDuetGRPOTrainer, SkillDuetMixin

__all__ = ["CPU_SAFE_DEFAULTS", "SNAPSHOT_DIRNAME", "SkillDuetCallback", "SkillDuetGRPOConfig",
           "SkillDuetGRPOTrainer", "SkillDuetMixin", "make_env_reward", "task_dataset"]
