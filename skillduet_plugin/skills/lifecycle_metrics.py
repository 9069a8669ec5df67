"""The numbers a skill lifecycle reports to the trainer's logger, and the counters a checkpoint carries so that a
resumed run reports what an uninterrupted one would (``SkillLifecycle`` mixes this in)."""

from __future__ import annotations

from typing import Any

from skillduet_plugin.skills.budget import count_tokens


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
        out = {f"skills/{k}": float(v) for k, v in self._counters.items()}
        out.update(self._last)
        summary = self.global_summary()
        out.update({"skills/global_scopes": summary["scopes"], "skills/global_items": summary["items"],
                    "skills/global_tokens": summary["tokens"]})
        for name, failures in self._backend_failures().items():
            out[f"skills/{name}_backend_failures"] = failures
        answered = self._counters["analyzer_requests"] - self._counters["analyzer_failures"]
        # share of the analyzer's replies that gave no usable skill (no <skill> text, degenerate, too short)
        out["skills/analyzer_parse_failure_rate"] = self._counters["rejected"] / answered if answered > 0 else 0.0
        for name, backend in (("analyzer", self._analyzer), ("synthesizer", self._synthesizer)):
            for key in ("timeouts", "completion_tokens", "truncated"):  # this process's, where the backend counts
                if backend is None or hasattr(backend, key):  # not built yet (a resumed run): nothing counted
                    out[f"skills/{name}_{key}"] = float(getattr(backend, key, 0))
        return out
