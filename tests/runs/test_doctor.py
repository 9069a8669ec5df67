"""``skillduet doctor``: a working setup passes (a real OpenAI-compatible server on loopback answers the analyzer
request, the verl plugin registers in a fresh process); a dead analyzer endpoint and a plugin whose import fails
(what verl swallows at debug level) are failures with their fix, and the command exits non-zero."""

from __future__ import annotations

import json
import os
import socket
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from skillduet_plugin import cli
from skillduet_plugin.runs import doctor

SKILL = "<skill>\n- Look around first, then go to the receptacle the task names and examine it.\n</skill>"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        self.server.requests.append(body)
        data = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": SKILL}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def chat_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads, server.requests = True, []
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: nothing listens there


def _analyzer(url: str) -> list[str]:
    return ["skillduet.analyzer.kind=openai", "skillduet.analyzer.model=skill-model",
            f"skillduet.analyzer.base_url={url}"]


def test_doctor_passes_with_a_live_endpoint(chat_server, tmp_path, capsys):
    url = f"http://127.0.0.1:{chat_server.server_address[1]}/v1"
    code = cli.main(["doctor", "env=toy", f"output_dir={tmp_path / 'run'}", *_analyzer(url)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "[FAIL]" not in out and "checks passed" in out
    assert "[ok] analyzer: openai skill-model" in out and "parsed into a Local skill" in out
    assert len(chat_server.requests) == 1  # one real extraction request
    assert chat_server.requests[0]["messages"][-1]["role"] == "user"
    if doctor._installed("verl"):
        assert "[ok] verl plugin: import verl registers trainer:skillduet_sync" in out


def test_doctor_fails_on_a_dead_endpoint(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(doctor, "check_plugin", lambda env=None: doctor.Check("verl plugin", True, "(not run)"))
    url = f"http://127.0.0.1:{_dead_port()}/v1"
    code = cli.main(["doctor", "env=toy", f"output_dir={tmp_path / 'run'}", *_analyzer(url)])
    out = capsys.readouterr().out
    assert code == 1
    assert f"[FAIL] analyzer: openai skill-model at {url}" in out and "connection" in out
    assert "fix: start the server or correct skillduet.analyzer.base_url" in out
    assert "failed: analyzer" in out


def test_doctor_config_error_exits_2(capsys):
    assert cli.main(["doctor", "env=toy", "no_such_key=1"]) == 2
    assert "no_such_key" in capsys.readouterr().err


def test_doctor_unwritable_bank_folder(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    target = doctor.run_target(None, ["env=toy", f"output_dir={blocker / 'run'}"])
    check = doctor.check_bank(target)
    assert not check.ok and "writable folder" in check.fix


@pytest.mark.slow
def test_plugin_check_reports_a_broken_plugin_import(tmp_path):
    """The entry point's module fails to import inside ``import verl`` (simulated by a ``sitecustomize`` that makes
    it raise): verl swallows it, the doctor shows the traceback and fails."""
    pytest.importorskip("verl")
    (tmp_path / "sitecustomize.py").write_text(textwrap.dedent("""
        import importlib.abc, sys

        class _Broken(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "skillduet_plugin.integrations.verl.plugin":
                    raise ImportError("simulated: the plugin's dependencies are missing")
                return None

        sys.meta_path.insert(0, _Broken())
    """))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in [str(tmp_path), os.environ.get("PYTHONPATH")] if p))
    check = doctor.check_plugin(env)
    assert not check.ok
    assert "simulated: the plugin's dependencies are missing" in check.detail
    assert "debug level" in check.detail and check.fix
