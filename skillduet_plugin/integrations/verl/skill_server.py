"""Serves the current Global skills cluster-wide: a named Ray actor the trainer publishes to after each
consolidation and every agent-loop worker (on any node) reads from.

The skill bank itself (SQLite) stays with the trainer; only the immutable Global versions travel, so no agent
loop ever reads a file that only one node can see.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Any

from skillduet_plugin.skills.types import GlobalSkills

logger = logging.getLogger(__name__)

SERVER_NAMESPACE = "skillduet"


class GlobalSkillStore:
    """The Globals in force, per scope, and a publication counter (the actor's body; plain for tests)."""

    def __init__(self) -> None:
        self._globals: dict[str, dict[str, Any]] = {}
        self._publication = 0

    def publish(self, globals_by_scope: dict[str, dict[str, Any]], step: int) -> int:
        """Replace the Globals of the given scopes (others are kept); returns the new publication number."""
        for scope, data in globals_by_scope.items():
            self._globals[str(scope)] = dict(data)
        self._publication += 1
        logger.info("skillduet: published Globals of %d scope(s) at step %d", len(globals_by_scope), step)
        return self._publication

    def get(self, scope: str) -> dict[str, Any] | None:
        return self._globals.get(str(scope))

    def publication(self) -> int:
        return self._publication

    def dump(self) -> dict[str, dict[str, Any]]:
        return dict(self._globals)


def global_to_dict(global_skills: GlobalSkills) -> dict[str, Any]:
    return asdict(global_skills)


def global_from_dict(data: dict[str, Any] | None, scope: str) -> GlobalSkills:
    if not data:
        return GlobalSkills(scope=scope, version=None, text="")
    return GlobalSkills(scope=data.get("scope", scope), version=data.get("version"), text=data.get("text", ""),
                        items=list(data.get("items") or []))


def create_server(name: str):
    """Create (or attach to) the named store actor; call from the trainer process, after ``ray.init``."""
    import ray  # lazy: ray

    actor_cls = ray.remote(num_cpus=0)(GlobalSkillStore)
    return actor_cls.options(name=name, namespace=SERVER_NAMESPACE, get_if_exists=True).remote()


class GlobalSkillClient:
    """Reads the Global of a scope from the named actor; one per agent-loop worker process.

    A missing actor (the ``skillduet_agent`` loop used without the ``skillduet_sync`` trainer) means no Global,
    reported once.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._handle: Any = None
        self._warned = False

    def _actor(self):
        if self._handle is None:
            import ray  # lazy: ray

            try:
                self._handle = ray.get_actor(self.name, namespace=SERVER_NAMESPACE)
            except ValueError:
                if not self._warned:
                    logger.warning("skillduet: no Global skill server named %r in namespace %r; rollouts run "
                                   "without a Global (is trainer.v1.trainer_mode=skillduet_sync set?)",
                                   self.name, SERVER_NAMESPACE)
                    self._warned = True
                return None
        return self._handle

    async def get(self, scope: str) -> GlobalSkills:
        actor = self._actor()
        if actor is None:
            return GlobalSkills(scope=scope, version=None, text="")
        return global_from_dict(await actor.get.remote(scope), scope)


_clients: dict[str, GlobalSkillClient] = {}


def client_for(name: str) -> GlobalSkillClient:
    """The process-wide client of the store ``name`` (one actor lookup per process)."""
    if name not in _clients:
        _clients[name] = GlobalSkillClient(name)
    return _clients[name]


__all__ = ["GlobalSkillClient", "GlobalSkillStore", "SERVER_NAMESPACE", "client_for",
           "create_server", "global_from_dict", "global_to_dict"]
