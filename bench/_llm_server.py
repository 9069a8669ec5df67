"""A loopback OpenAI-compatible chat server that answers like a slow remote analyzer/synthesizer, for benchmarks.

``POST /v1/chat/completions`` waits a latency drawn around ``--latency`` seconds (log-normal, ``--sigma``), fails
a ``--fail`` share of attempts with HTTP 503 (retryable), and answers by the prompt's kind: a Local skill
(``<skill>``) for analyzer prompts, ``<global>`` items for synthesize and compress prompts. Answers are a pure
function of the prompt (and the attempt count for failures), so runs repeat. Skills of the same task are often
exact or near duplicates of each other, as a real analyzer's are. ``GET /stats`` returns the request counts and
the most requests in flight at once.

It binds 127.0.0.1 only, serves at most ``--max-requests`` requests (then answers 503), and stops itself after
``--idle-s`` seconds without a request. ``python bench/_llm_server.py`` prints ``port <n>`` once it listens;
:func:`start` runs it as a child process and returns ``(process, base_url)``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

_OBJECTS = "apple mug plate knife tomato bowl cup pan egg lettuce potato spatula".split()
_PLACES = "countertop cabinet fridge microwave sinkbasin diningtable drawer shelf stoveburner garbagecan".split()
_LINES = ("Go to the {p} first and look for the {o} before opening anything else.",
          "Take the {o} as soon as you see it; do not put it down on the way.",
          "Open the {p} before trying to take or put anything there.",
          "If the {o} is not on the {p}, check the {q} next instead of repeating the same action.",
          "Heat the {o} with the microwave only after you hold it.",
          "Cool the {o} in the fridge, then carry it to the {p}.",
          "Clean the {o} at the sinkbasin before you move it to the {p}.",
          "The failed attempt kept looking around; go directly to the {p} once the {o} is in hand.",
          "Use the exact action text from the admissible list, e.g. move {o} to {p}.",
          "Do not examine the {p} repeatedly; one look tells you what is there.")
_EXTRA = ("Stop after {n} failed tries and look elsewhere.", "There are usually {n} places to search for the {o}.",
          "Check the inventory if the {o} seems to vanish.", "Count {n} steps at most per room.",
          "Prefer closed receptacles for the {o}.", "Say exactly one action per turn.")
_TASK = re.compile(r"^Task: (.*)$", re.MULTILINE)
_ITEM = re.compile(r"^- (.+)$", re.MULTILINE)


def skill_text(prompt: str) -> str:
    """A 2-6 line ALFWorld-style skill for an analyzer prompt: per task a family text, returned as it is (an
    exact duplicate across steps), slightly edited (a near duplicate) or rewritten, by the prompt's hash."""
    task = (_TASK.search(prompt) or [None, prompt[:200]])[1]
    family = random.Random(_digest(task))
    rng = random.Random(_digest(prompt))
    o, p, q = family.choice(_OBJECTS), family.choice(_PLACES), family.choice(_PLACES)
    base = [line.format(o=o, p=p, q=q) for line in family.sample(_LINES, family.randint(2, 6))]
    roll = rng.random()
    if roll < 0.1:
        lines = base
    elif roll < 0.5:
        lines = list(base)
        k = rng.randrange(len(lines))
        lines[k] = lines[k].replace("the ", "the " + rng.choice(["", "nearest ", "closed ", "right "]), 1)
    else:
        lines = [line.format(o=rng.choice(_OBJECTS), p=rng.choice(_PLACES), q=rng.choice(_PLACES))
                 for line in rng.sample(_LINES, rng.randint(2, 6))]
        k = rng.randrange(len(lines))  # a rewrite also says something of its own
        lines[k] += f" {rng.choice(_EXTRA).format(n=rng.randint(2, 9), o=rng.choice(_OBJECTS))}"
    return "\n".join(f"- {line}" for line in lines)


def answer(messages: list[dict]) -> str:
    """The reply to a chat request, by the kind of prompt it is."""
    user = str(messages[-1].get("content", ""))
    if "## New skills" in user:  # synthesize: current items plus the first lines of the new skills
        current = _ITEM.findall(user.split("## New skills")[0])
        new = [m.group(1) for m in re.finditer(r"### Skill \d+\n- (.+)", user)]
        items = list(dict.fromkeys(current + new))[:60]
        return "<global>\n" + "\n".join(f"- {x}" for x in items) + "\n</global>"
    if user.startswith("## Items"):  # compress: keep the first half of the group
        items = _ITEM.findall(user)
        target = re.search(r"at most (\d+) items", user)
        keep = items[: max(1, int(target.group(1)) if target else len(items) // 2)]
        return "<global>\n" + "\n".join(f"- {x}" for x in keep) + "\n</global>"
    return "<skill>\n" + skill_text(user) + "\n</skill>"


def _digest(text: str) -> int:
    return int(hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16], 16)


class SlowServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512  # a burst of concurrent connects must not overflow the listen backlog

    def __init__(self, *, latency: float, sigma: float, fail: float, max_requests: int, seed: int = 0) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.latency, self.sigma, self.fail = latency, sigma, fail
        self.max_requests, self.seed = max_requests, seed
        self.lock = threading.Lock()
        self.stats = {"requests": 0, "failed": 0, "inflight": 0, "max_inflight": 0, "refused": 0}
        self.attempts: dict[int, int] = {}
        self.last_request = time.monotonic()

    def plan(self, key: int) -> tuple[float, bool]:
        """(delay, fail) of this attempt of the request with content hash ``key``: a pure function of both."""
        with self.lock:
            n = self.attempts.get(key, 0)
            self.attempts[key] = n + 1
        rng = random.Random(f"{self.seed}:{key}:{n}")
        delay = self.latency * rng.lognormvariate(0.0, self.sigma) if self.latency > 0 else 0.0
        return delay, rng.random() < self.fail


class _Handler(BaseHTTPRequestHandler):
    server: SlowServer
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:  # /stats; /stats?reset=1 also restarts the in-flight peak from now
        with self.server.lock:
            text = json.dumps(self.server.stats)
            if "reset=1" in self.path:
                self.server.stats["max_inflight"] = self.server.stats["inflight"]
        self._send(200, text)

    def do_POST(self) -> None:
        srv = self.server
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        with srv.lock:
            srv.last_request = time.monotonic()
            if srv.stats["requests"] >= srv.max_requests:
                srv.stats["refused"] += 1
                refused = True
            else:
                refused = False
                srv.stats["requests"] += 1
                srv.stats["inflight"] += 1
                srv.stats["max_inflight"] = max(srv.stats["max_inflight"], srv.stats["inflight"])
        if refused:
            self._send(503, json.dumps({"error": {"message": "request bound reached"}}))
            return
        try:
            delay, fail = srv.plan(_digest(json.dumps(body["messages"], sort_keys=True)))
            time.sleep(delay)
            if fail:
                with srv.lock:
                    srv.stats["failed"] += 1
                self._send(503, json.dumps({"error": {"message": "injected overload"}}))
            else:
                message = {"role": "assistant", "content": answer(body["messages"])}
                self._send(200, json.dumps({"choices": [{"index": 0, "message": message}]}))
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            with srv.lock:
                srv.stats["inflight"] -= 1

    def _send(self, status: int, text: str) -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def serve(args: argparse.Namespace) -> None:
    srv = SlowServer(latency=args.latency, sigma=args.sigma, fail=args.fail, max_requests=args.max_requests,
                     seed=args.seed)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    print(f"port {srv.server_address[1]}", flush=True)
    try:
        while time.monotonic() - srv.last_request < args.idle_s:
            time.sleep(0.2)
    finally:
        srv.shutdown()
        srv.server_close()


def start(*, latency: float = 2.0, sigma: float = 0.25, fail: float = 0.02, max_requests: int = 100_000,
          idle_s: float = 300.0, seed: int = 0) -> tuple[subprocess.Popen, str]:
    """Run the server in a child process (its threads then cost this process no CPU time); returns the
    process and the ``base_url`` to put in a backend config. Stop it with ``process.terminate()``."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--latency", str(latency), "--sigma", str(sigma),
           "--fail", str(fail), "--max-requests", str(max_requests), "--idle-s", str(idle_s), "--seed", str(seed)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.startswith("port "):
        proc.kill()
        raise RuntimeError(f"the loopback LLM server did not start (said {line!r})")
    return proc, f"http://127.0.0.1:{int(line.split()[1])}/v1"


def stats(base_url: str, *, reset: bool = False) -> dict:
    """The server's counters (``GET /stats``); ``reset`` restarts the in-flight peak after reading it."""
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never via a proxy
    url = base_url.rsplit("/v1", 1)[0] + "/stats" + ("?reset=1" if reset else "")
    with opener.open(url, timeout=10) as response:
        return json.loads(response.read())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=2.0, help="median seconds per answer (default 2)")
    parser.add_argument("--sigma", type=float, default=0.25, help="log-normal spread of the latency")
    parser.add_argument("--fail", type=float, default=0.02, help="share of attempts answered 503 (default 0.02)")
    parser.add_argument("--max-requests", type=int, default=100_000, help="requests served at most")
    parser.add_argument("--idle-s", type=float, default=300.0, help="stop after this long without a request")
    parser.add_argument("--seed", type=int, default=0)
    serve(parser.parse_args(argv))


if __name__ == "__main__":
    main()
