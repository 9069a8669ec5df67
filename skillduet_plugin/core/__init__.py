"""The bottom layer: pure tensor math of SkillDuet (the gated OPD loss, response-shift scores, batched
log-probs) and the torch-free pieces every layer uses (the config language ``settings``, ``registry``, ``names``).

The tensor functions are imported on first use, so that ``core.settings`` stays importable without torch.
"""

import importlib
from typing import Any

_LAZY = {"aggregate": "opd", "opd_loss": "opd", "opd_per_token": "opd", "contrast": "scores",
         "response_shift": "scores", "select_top": "scores", "strength": "scores", "utility": "scores"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"skillduet_plugin.core.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = sorted(_LAZY)
