"""``logged``: an LLM backend (found through the ``skillduet.backends`` entry point)."""

from __future__ import annotations

import json
import os

from skillduet_plugin.llm.base import ChatRequest
from skillduet_plugin.llm.offline import OfflineBackend
from skillduet_plugin.llm.registry import register_backend

#: the file the backend appends one line per request to (set by whoever wants to see its requests)
LOG_VARIABLE = "LANTERNS_BACKEND_LOG"
#: the last bullet of every Local skill this backend writes, so a run's bank shows whose skills it holds
MARKER = "Written by the lanterns backend."


@register_backend("logged")
class LoggedOfflineBackend(OfflineBackend):
    """The offline analyzer's replies, each Local skill ending with :data:`MARKER`, and each request's kind
    appended to the file ``$LANTERNS_BACKEND_LOG``."""

    async def _complete(self, request: ChatRequest) -> str:
        kind = (request.payload or {}).get("kind")
        path = os.environ.get(LOG_VARIABLE)
        if path:
            with open(path, "a") as log:
                log.write(json.dumps({"kind": kind, "pid": os.getpid()}) + "\n")
        reply = await super()._complete(request)
        if str(kind).startswith("local_"):
            reply = reply.replace("</skill>", f"- {MARKER}\n</skill>")
        return reply
