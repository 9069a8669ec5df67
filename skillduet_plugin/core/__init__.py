"""Pure tensor math of SkillDuet: the gated OPD loss, response-shift scores and batched log-probs."""

from skillduet_plugin.core.opd import aggregate, opd_loss, opd_per_token
from skillduet_plugin.core.scores import contrast, response_shift, select_top, strength, utility

__all__ = ["aggregate", "opd_loss", "opd_per_token", "contrast", "response_shift", "select_top", "strength",
           "utility"]
