"""The lab-fork patch (``patches/verl-dp_actor-skillduet-opd.patch``) applies to a real legacy verl release from
PyPI and its patched ``update_policy`` adds exactly lambda times ``core.opd``'s gated OPD loss."""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PATCH = os.path.join(REPO, "patches", "verl-dp_actor-skillduet-opd.patch")
# verl 0.7.1 is the newest PyPI release that still has workers/actor/dp_actor.py (0.8.0 removed it)
LEGACY_VERSION = os.environ.get("SKILLDUET_LEGACY_VERL", "0.7.1")
CACHE = os.environ.get("SKILLDUET_LEGACY_VERL_CACHE", os.path.expanduser("~/.cache/skillduet-ci/legacy-verl"))


def missing(reason: str) -> None:
    """A prerequisite is missing: skipped on a workstation, a failure in CI (``CI=true``), where a skip would let
    the patch go untested."""
    if os.environ.get("CI", "").lower() in ("true", "1"):
        pytest.fail(f"{reason} (CI=true: the patch test must run in CI)")
    pytest.skip(reason)


def legacy_wheel() -> str:
    """The cached legacy verl wheel, downloaded once with ``pip download --no-deps``."""
    found = glob.glob(os.path.join(CACHE, f"verl-{LEGACY_VERSION}-*.whl"))
    if found:
        return found[0]
    os.makedirs(CACHE, exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "pip", "download", f"verl=={LEGACY_VERSION}", "--no-deps",
                           "--only-binary=:all:", "-d", CACHE], capture_output=True, text=True, timeout=600)
    found = glob.glob(os.path.join(CACHE, f"verl-{LEGACY_VERSION}-*.whl"))
    if proc.returncode != 0 or not found:
        missing(f"cannot download verl=={LEGACY_VERSION} from PyPI: {proc.stderr[-500:]}")
    return found[0]


@pytest.fixture(scope="module")
def patched_verl(tmp_path_factory):
    if importlib.util.find_spec("torch") is None:
        missing("torch is not installed")
    if shutil.which("patch") is None:
        missing("the `patch` program is not installed")
    root = tmp_path_factory.mktemp("legacy_verl")
    with zipfile.ZipFile(legacy_wheel()) as wheel:
        wheel.extractall(root, members=[n for n in wheel.namelist() if n.startswith("verl/")])
    proc = subprocess.run(["patch", "-p1", "--forward", "-i", PATCH], cwd=root, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return str(root)


def test_patch_applies_and_adds_the_whitelist_and_the_loss_term(patched_verl):
    source = open(os.path.join(patched_verl, "verl", "workers", "actor", "dp_actor.py")).read()
    assert '("skillduet_teacher_log_probs", "skillduet_opd_mask")' in source
    assert "from skillduet_plugin.core.opd import opd_per_token" in source
    assert "policy_loss = policy_loss + skillduet.opd_coef * opd_loss" in source
    # the settings come from the package (their one declaration), never a restated default
    assert "skillduet = SkillDuetConfig.from_environ()" in source and '"0.1"' not in source


@pytest.mark.slow
def test_patched_update_policy_matches_core_opd(patched_verl):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([patched_verl, REPO]), VERL_USE_EXTERNAL_PLUGINS="none",
               CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, os.path.join(REPO, "tests", "verl", "legacy_dp_actor_check.py"),
                           patched_verl], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT"))
    result = json.loads(line[len("RESULT"):])
    assert result["keys"] == ["skillduet_opd_mask", "skillduet_teacher_log_probs"]  # survived the whitelist
    assert result["opd_metric"] == pytest.approx(result["expected_opd"], abs=1e-6)
    assert result["grad_norm"] > 1e-3 and result["grad_max_diff"] < 1e-6  # grad = 0.3 * grad(core.opd_loss)
    assert result["row1_grad"] == 0.0  # the skill-less row gets no distillation gradient


def test_a_missing_prerequisite_fails_in_ci_and_skips_elsewhere(monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        missing("the `patch` program is not installed")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception):
        missing("the `patch` program is not installed")


def test_the_docs_name_the_release_the_patch_is_made_against():
    """README and patches/README.md give the one bound the patch supports: forks of verl <= 0.7.x, made against
    LEGACY_VERSION (0.8 removed workers/actor/dp_actor.py)."""
    minor = ".".join(LEGACY_VERSION.split(".")[:2])
    readme = open(os.path.join(REPO, "README.md")).read()
    patches = open(os.path.join(REPO, "patches", "README.md")).read()
    [fork_row] = [line for line in readme.splitlines() if "patches/" in line and line.startswith("| a lab fork")]
    assert f"≤ {minor}.x" in fork_row and f"made against {LEGACY_VERSION}" in fork_row
    assert f"<= {minor}.x" in patches and f"made against verl {LEGACY_VERSION}" in patches
    assert "0.8" not in fork_row.replace("0.8 has no", "")
