"""A fault-injecting OpenAI-compatible chat server on 127.0.0.1 for the HTTP backend tests.

Each request's last message content is a key; ``scripts[key]`` lists what the server does on the key's 1st,
2nd, ... attempt (the last entry repeats): ``ok``, ``500``, ``503``, ``429``, ``400``, ``hang``, ``drop``,
``malformed``, ``empty``, ``nochoices``, ``think``, ``slow``, ``garbage`` (non-JSON bytes), ``surrogate`` (a
skill with a JSON-escaped lone surrogate), ``huge`` (a 4 MB answer), ``advice`` (a usable skill). Keys without a
script follow ``default``. ``refuse_forms=True``: a request carrying a reply form (``structured_outputs``,
``response_format``) is answered HTTP 400, as a server without structured outputs does.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


# about 6.6 MB: a line of advice, then one line too long to read whole (cut, so left out as truncated)
_HUGE = ("<skill>Open the fridge before you cool the apple.\n" + " ".join(f"word{i}" for i in range(600_000))
         + "</skill>")


class FaultServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, scripts: dict[str, list[str]] | None = None, *, hang_s: float = 2.0,
                 slow_s: float = 0.2, default: list[str] | None = None, refuse_forms: bool = False) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.refuse_forms = refuse_forms
        self.scripts = dict(scripts or {})
        self.default = list(default or ["ok"])
        self.hang_s, self.slow_s = hang_s, slow_s
        self.attempts: dict[str, int] = {}
        self.bodies: list[dict] = []
        self.headers_seen: list[dict[str, str]] = []
        self.inflight = 0
        self.max_inflight = 0
        self.lock = threading.Lock()
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def __enter__(self) -> "FaultServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
        self.server_close()

    def next_behaviour(self, key: str) -> str:
        with self.lock:
            n = self.attempts.get(key, 0)
            self.attempts[key] = n + 1
        script = self.scripts.get(key, self.default)
        return script[min(n, len(script) - 1)]

    def handle_error(self, request, client_address) -> None:  # a client that timed out closed its socket
        pass


class _Handler(BaseHTTPRequestHandler):
    server: FaultServer
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        srv = self.server
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        key = body["messages"][-1]["content"]
        with srv.lock:
            srv.bodies.append(body)
            srv.headers_seen.append(dict(self.headers))
            srv.inflight += 1
            srv.max_inflight = max(srv.max_inflight, srv.inflight)
        try:
            if srv.refuse_forms and ("structured_outputs" in body or "response_format" in body):
                self._send(400, json.dumps({"error": {"message": "unsupported parameter: structured outputs"}}))
                return
            self._respond(srv.next_behaviour(key), key)
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            with srv.lock:
                srv.inflight -= 1

    def _respond(self, behaviour: str, key: str) -> None:
        srv = self.server
        if behaviour == "hang":
            time.sleep(srv.hang_s)
            behaviour = "ok"
        if behaviour == "slow":
            time.sleep(srv.slow_s)
            behaviour = "ok"
        if behaviour == "drop":
            self.close_connection = True
            self.connection.close()
            return
        content = {"ok": f"reply to {key}", "empty": "", "think": "<think>draft</think>\n<skill>\nx\n</skill>",
                   "advice": "<skill>Open every closed receptacle before you search the rest of the room.</skill>",
                   "surrogate": "<skill>Open the fridge \ud800 before you cool the apple.</skill>\n<global>\n"
                                "- Cool the apple \udcff in the fridge first.\n</global>"}
        if behaviour == "huge":
            content["huge"] = _HUGE
        if behaviour in content:
            message = {"role": "assistant", "content": content[behaviour]}
            payload = json.dumps({"choices": [{"index": 0, "message": message}]})
            self._send(200, payload)
        elif behaviour == "nochoices":
            self._send(200, json.dumps({"object": "chat.completion", "choices": []}))
        elif behaviour == "garbage":
            self._send_bytes(200, b"\x00\xff\xfe not json \x1b[31m")
        elif behaviour == "malformed":
            self._send(200, '{"choices": [{"message": {"content": "trunc')
        elif behaviour.isdigit():
            self._send(int(behaviour), json.dumps({"error": {"message": f"injected {behaviour}"}}))
        else:
            raise ValueError(f"unknown behaviour {behaviour!r}")

    def _send(self, status: int, text: str) -> None:
        self._send_bytes(status, text.encode())

    def _send_bytes(self, status: int, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
