"""A real ``vllm serve`` (vLLM's OpenAI-compatible server) on 127.0.0.1 for tests: started on a free port, waited
for, and stopped (its whole process group) on exit.

vLLM's CPU build runs here; :data:`CPU_ENV` holds the settings that make it start on a small CPU machine
(a fixed KV-cache size instead of a share of RAM, no OpenMP core binding, no warm-up pass).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

#: environment for vLLM's CPU build on a machine with few cores
CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "VLLM_CPU_CI_ENV": "1",
           "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class VLLMServer:
    """``with VLLMServer(model_dir, log_path) as server: server.base_url``: one ``vllm serve`` process.

    ``served_name`` is the model name requests use; ``max_model_len`` bounds prompt + reply tokens.
    """

    def __init__(self, model_dir: str | Path, log_path: str | Path, *, served_name: str = "analyzer",
                 max_model_len: int = 8192, max_num_seqs: int = 8, start_timeout_s: float = 1200.0,
                 extra_args: tuple[str, ...] = ()) -> None:
        self.model_dir, self.log_path = str(model_dir), Path(log_path)
        self.served_name, self.port = served_name, free_port()
        self.start_timeout_s = float(start_timeout_s)
        self.args = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", self.model_dir,
                     "--served-model-name", served_name, "--host", "127.0.0.1", "--port", str(self.port),
                     "--dtype", "float32", "--enforce-eager", "--max-model-len", str(max_model_len),
                     "--max-num-seqs", str(max_num_seqs), *extra_args]
        self.proc: subprocess.Popen | None = None
        self.startup_s: float | None = None

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return self.root_url + "/v1"

    def __enter__(self) -> "VLLMServer":
        env = {**os.environ, **CPU_ENV}
        start = time.monotonic()
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(self.args, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        try:
            self._wait_ready(start)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - start
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _wait_ready(self, start: float) -> None:
        while time.monotonic() - start < self.start_timeout_s:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"vllm serve exited with {self.proc.returncode} before it was ready; log: "
                                   f"{self.log_path}\n{self.log_tail()}")
            try:
                if httpx.get(self.base_url + "/models", timeout=5.0, trust_env=False).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(2.0)
        raise TimeoutError(f"vllm serve not ready after {self.start_timeout_s:g}s; log: {self.log_path}\n"
                           f"{self.log_tail()}")

    def metric(self, name: str) -> float:
        """The sum of one Prometheus counter of the server's ``/metrics`` over its label sets."""
        text = httpx.get(self.root_url + "/metrics", timeout=30.0, trust_env=False).text
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name) and (line[len(name)] in "{ "):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop the server and its engine process (the whole process group); idempotent."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=60)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=30)
        if getattr(self, "_log", None) is not None:
            self._log.close()
            self._log = None
