"""Names the core and the adapters accept, importable without torch (every config validates against these)."""

#: How per-token OPD terms are aggregated (``core.opd.aggregate``); the paper's Eq. 1 is ``token-mean``.
OPD_AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")

#: When OPD teacher log-probs are computed: once per rollout batch, or live in every loss call.
TEACHER_AT = ("generation", "loss")

#: How the policy acts each turn: free generation, or a choice among the admissible actions (``rollout.choice``).
ACTION_SELECTIONS = ("generate", "choose")

__all__ = ["ACTION_SELECTIONS", "OPD_AGGREGATIONS", "TEACHER_AT"]
