"""A backend registered outside the package (here, in this test module) serves as analyzer and synthesizer end to
end: the config accepts its kind, the lifecycle builds it from the config, its replies become the Local skills in
the bank and the Global of a consolidation. This is the "how to add a backend" recipe of docs/ARCHITECTURE.md."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from skillduet_plugin.config import ConfigError, SkillDuetConfig
from skillduet_plugin.core.conversation import ChatTokenizer
from skillduet_plugin.llm.base import ChatBackend, ChatRequest
from skillduet_plugin.llm.registry import BACKENDS, register_backend
from skillduet_plugin.skills.bank import BANK_FILENAME
from skillduet_plugin.skills.lifecycle import SkillLifecycle

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "skills"))
from test_skill_lifecycle import _length_logprob_fn, _step_trajectories  # noqa: E402


class CannedBackend(ChatBackend):
    """Answers every analyzer request with one fixed skill and every merge with one fixed Global item."""

    kind = "canned"

    async def _complete(self, request: ChatRequest) -> str:
        kind = (request.payload or {}).get("kind", "")
        if kind in ("synthesize", "compress"):
            return "<global>\n- canned rule: open every container before you search the room\n</global>"
        return "<skill>canned: open every container before searching the room for the target</skill>"


@pytest.fixture()
def registered():
    register_backend("canned")(CannedBackend)
    yield
    BACKENDS.unregister("canned")


def test_an_unregistered_kind_is_a_config_error():
    with pytest.raises(ConfigError, match="kind='canned' is invalid"):
        SkillDuetConfig(analyzer={"kind": "canned"})


def test_a_backend_registered_in_a_test_writes_the_skills_and_the_global(registered, tmp_path, tiny_tokenizer):
    cfg = SkillDuetConfig(consolidation_interval=1, analyzer={"kind": "canned"}, synthesizer={"kind": "canned"})
    lc = SkillLifecycle(cfg, tmp_path / BANK_FILENAME, tokenizer=tiny_tokenizer, similarity=None)
    trajs = _step_trajectories(1, ChatTokenizer(tiny_tokenizer), lc)
    result = lc.extract(trajs, 1)
    assert type(lc.analyzer) is CannedBackend and type(lc.synthesizer) is CannedBackend  # built from the config
    assert result.skills and {s.text for s in result.skills} == {
        "canned: open every container before searching the room for the target"}
    assert {s.skill_id for s in lc.bank.candidates()} == {s.skill_id for s in result.skills}
    lc.score(result.skills, trajs, _length_logprob_fn, assignment=result.assignment)
    reports = lc.end_step(1)
    assert reports and all(r.items == ["canned rule: open every container before you search the room"]
                           for r in reports if not r.fallback)
    assert any(not r.fallback for r in reports)
    assert lc.analyzer.calls > 0 and lc.synthesizer.calls > 0
    lc.close()
