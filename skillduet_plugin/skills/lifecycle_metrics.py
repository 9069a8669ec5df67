"""The numbers a skill lifecycle reports to the trainer's logger, and the counters a checkpoint carries so that a
resumed run reports what an uninterrupted one would (``SkillLifecycle`` mixes this in)."""

from __future__ import annotations

import json
import logging
from collections import Counter
from typing import Any

from skillduet_plugin.skills.budget import count_tokens
from skillduet_plugin.skills.sanitize import REJECT_BACKEND_FAILED

logger = logging.getLogger(__name__)

#: counter keys of the analyzer's rejected replies, one per reason (``skills.judge``); logged under this name
#: (``skillduet/analyzer/rejected/<reason>`` in verl, ``skills/analyzer/rejected/<reason>`` in TRL)
REJECTED_PREFIX = "analyzer/rejected/"
#: bank meta key of the analyzer's reply counts, for ``skillduet skills show``
REPLIES_META_KEY = "analyzer_replies"


class LifecycleMetrics:
    """Counters (``_counters``), the last step's values (``_last``) and backend failure counts of a
    ``SkillLifecycle``; it holds ``bank``, ``tokenizer``, ``_analyzer``, ``_synthesizer`` and
    ``_failure_offset``."""

    def _state(self) -> dict[str, Any]:
        return {"counters": self._counters, "last": self._last, "backend_failures": self._backend_failures()}

    def _backend_failures(self) -> dict[str, float]:
        """Failures counted by the backends built so far (plus those before a restore)."""
        out = dict(self._failure_offset)
        for name, backend in (("analyzer", self._analyzer), ("synthesizer", self._synthesizer)):
            if backend is not None and hasattr(backend, "failures"):
                out[name] = out.get(name, 0.0) + float(backend.failures)
        return out

    def global_summary(self) -> dict[str, float]:
        """Size of the Globals in force: scopes with a version, items and tokens in all, newest version."""
        scopes = items = tokens = newest = 0
        for scope in self.bank.scopes():
            g = self.global_for(scope)
            if g.version is None:
                continue
            scopes += 1
            items += len(g.items)
            tokens += count_tokens(g.text, self.tokenizer)
            newest = max(newest, int(g.version))
        return {"scopes": float(scopes), "items": float(items), "tokens": float(tokens), "version_max": float(newest)}

    def metrics(self) -> dict[str, float]:
        """Numbers for the trainer's logger: cumulative counters, the last step's values, the current Globals."""
        out = {(k if "/" in k else f"skills/{k}"): float(v) for k, v in self._counters.items()}
        out.update(self._last)
        summary = self.global_summary()
        out.update({"skills/global_scopes": summary["scopes"], "skills/global_items": summary["items"],
                    "skills/global_tokens": summary["tokens"]})
        for name, failures in self._backend_failures().items():
            out[f"skills/{name}_backend_failures"] = failures
        answered = self._counters["analyzer_requests"] - self._counters["analyzer_failures"]
        # share of the analyzer's replies that gave no usable skill (not advice: skills.judge; degenerate, too short)
        out["skills/analyzer_parse_failure_rate"] = self._counters["rejected"] / answered if answered > 0 else 0.0
        for name, backend in (("analyzer", self._analyzer), ("synthesizer", self._synthesizer)):
            # this process's, where the backend counts
            for key in ("timeouts", "completion_tokens", "truncated", "constrained", "form_refusals"):
                if backend is None or hasattr(backend, key):  # not built yet (a resumed run): nothing counted
                    out[f"skills/{name}_{key}"] = float(getattr(backend, key, 0))
        return out

    def _count_replies(self, result: Any, stats: Any, step: int) -> None:
        """Count a step's rejected analyzer replies by reason, say when every reply was rejected (those
        trajectories train without a Local skill, so without OPD), and tell the bank and the tracker."""
        reasons = Counter(reason for reason, _ in result.rejected if reason != REJECT_BACKEND_FAILED)
        for reason, n in reasons.items():
            self._counters[REJECTED_PREFIX + reason] = self._counters.get(REJECTED_PREFIX + reason, 0) + n
        answered = stats.requests - stats.failures
        all_rejected = answered > 0 and sum(reasons.values()) == answered
        eligible = stats.trajectories - sum(stats.skipped.values())
        self._counters["analyzer_all_rejected_steps"] = self._counters.get("analyzer_all_rejected_steps", 0) + int(
            all_rejected)
        self._last.update({"analyzer/step_accepted": float(answered - sum(reasons.values())),
                           "analyzer/step_all_rejected": float(all_rejected),
                           "analyzer/step_without_local_skill": float(max(0, eligible - stats.assigned))})
        if all_rejected:
            logger.warning("step %d: all %d analyzer replies were rejected (%s): %d trajectories get no Local skill "
                           "and no OPD term this step", step, answered, dict(reasons),
                           max(0, eligible - stats.assigned))
        if self.write:
            totals = {k[len(REJECTED_PREFIX):]: int(v) for k, v in self._counters.items()
                      if k.startswith(REJECTED_PREFIX)}
            answered_total = self._counters["analyzer_requests"] - self._counters["analyzer_failures"]
            self.bank.set_meta(REPLIES_META_KEY, json.dumps(
                {"answered": int(answered_total), "accepted": int(answered_total - sum(totals.values())),
                 "rejected": totals, "all_rejected_steps": int(self._counters["analyzer_all_rejected_steps"])},
                sort_keys=True))
            self.tracker.on_extraction(step, result.rejected, int(answered - sum(reasons.values())))
