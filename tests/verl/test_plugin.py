"""The ``verl.plugins`` entry point: discovered by ``import verl`` (also in a Ray worker), cheap, and loud."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("verl")

from skillduet_plugin.integrations.verl import plugin  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROBE = textwrap.dedent("""
    import json, sys
    import verl
    cheap = {m: m in sys.modules for m in ("skillduet_plugin.integrations.verl.plugin", "verl.trainer.ppo.v1",
                                          "skillduet_plugin.integrations.verl.trainer")}
    import verl.trainer.ppo.v1.trainer_base as v1
    import verl.experimental.agent_loop.agent_loop as al
    from skillduet_plugin.integrations.verl.plugin import FAILURES
    print("RESULT" + json.dumps({"cheap": cheap, "trainer": v1.get_trainer_cls("skillduet_sync").__name__,
                                 "agent_loop": al._agent_loop_registry.get("skillduet_agent"),
                                 "failures": FAILURES}))
""")


def _result(stdout: str) -> dict:
    line = next(line for line in stdout.splitlines() if line.startswith("RESULT"))
    return json.loads(line[len("RESULT"):])


def test_entry_point_is_declared():
    eps = importlib.metadata.entry_points(group="verl.plugins")
    ours = [ep for ep in eps if ep.name == "skillduet"]
    assert ours and ours[0].value == "skillduet_plugin.integrations.verl.plugin"


def test_import_verl_discovers_and_registers_lazily():
    env = dict(os.environ, VERL_USE_EXTERNAL_PLUGINS="auto", PYTHONPATH=REPO)
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = _result(proc.stdout)
    # `import verl` loaded the entry point but nothing heavy
    assert result["cheap"] == {"skillduet_plugin.integrations.verl.plugin": True, "verl.trainer.ppo.v1": False,
                               "skillduet_plugin.integrations.verl.trainer": False}
    assert result["trainer"] == "SkillDuetTrainer"
    assert result["agent_loop"] == {"_target_": "skillduet_plugin.integrations.verl.agent_loop.SkillDuetAgentLoop"}
    assert result["failures"] == []


@pytest.mark.slow
def test_registered_inside_a_ray_worker():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": REPO, "VERL_USE_EXTERNAL_PLUGINS": "auto"}})
    try:
        @ray.remote(num_cpus=1)
        def probe():
            import sys

            import verl  # noqa: F401 - the entry point runs here, in the worker process

            loaded = "skillduet_plugin.integrations.verl.plugin" in sys.modules
            import verl.experimental.agent_loop.agent_loop as al
            import verl.trainer.ppo.v1.trainer_base as v1

            return loaded, "skillduet_sync" in v1.TRAINER_REGISTRY, "skillduet_agent" in al._agent_loop_registry

        assert ray.get(probe.remote(), timeout=600) == (True, True, True)
    finally:
        ray.shutdown()


def test_failed_registration_is_loud(monkeypatch, capsys, tmp_path):
    (tmp_path / "broken_skillduet_target.py").write_text("raise RuntimeError('boom in registration')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(plugin, "FAILURES", [])
    with pytest.warns(RuntimeWarning, match="registration FAILED"):
        plugin._register("broken_skillduet_target")
    err = capsys.readouterr().err
    assert "registration FAILED" in err and "boom in registration" in err
    assert plugin.FAILURES and plugin.FAILURES[0][0] == "broken_skillduet_target"


def test_post_import_hook_runs_after_the_package_body(monkeypatch, tmp_path):
    pkg = tmp_path / "fake_verl_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("REGISTRY = {}\n")
    (tmp_path / "fake_registrant.py").write_text(
        "import fake_verl_pkg\nfake_verl_pkg.REGISTRY['ours'] = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(plugin, "REGISTRATIONS", {"fake_verl_pkg": "fake_registrant"})
    monkeypatch.setattr(plugin, "COMPAT_FIXES", {})
    plugin.install()
    try:
        assert "fake_registrant" not in sys.modules  # nothing imported before the package is
        import fake_verl_pkg

        assert fake_verl_pkg.REGISTRY == {"ours": True}
    finally:
        for name in ("fake_verl_pkg", "fake_registrant"):
            sys.modules.pop(name, None)
        plugin._finder.pending.pop("fake_verl_pkg", None)
