"""The Local skill's constrained reply form (``reply_form``): what an OpenAI-compatible server is sent, the fallback
when a server refuses it, the JSON form turned back into ``<skill>``, and xgrammar's logits processor on the
transformers backend (every reply in the form)."""

from __future__ import annotations

import json
import re

import pytest
from llm_fault_server import FaultServer

from skillduet_plugin.config import BackendConfig, ConfigError, SkillDuetConfig
from skillduet_plugin.llm import ChatRequest, make_backend
from skillduet_plugin.llm.reply_form import SKILL_FORM, SKILL_REGEX, skill_from_json


def _openai(server: FaultServer, form: str):
    return make_backend(BackendConfig(kind="openai", model="m", base_url=server.base_url, timeout_s=5,
                                      max_retries=1, backoff_s=0.0, concurrency=1, reply_form=form))


def _req(key: str, form: str | None = SKILL_FORM) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": key}], form=form)


@pytest.mark.parametrize("form,field", [("regex", "structured_outputs"), ("json_schema", "response_format")])
def test_skill_requests_carry_the_form_and_others_do_not(form, field):
    with FaultServer(default=["advice"]) as server:
        backend = _openai(server, form)
        assert backend.generate([_req("a"), _req("b", form=None)])[0] is not None
        by_key = {b["messages"][-1]["content"]: b for b in server.bodies}
    assert field in by_key["a"] and field not in by_key["b"]
    if form == "regex":
        assert by_key["a"][field] == {"regex": SKILL_REGEX}
    else:
        assert by_key["a"][field]["json_schema"]["schema"]["properties"]["skill"]["maxItems"] == 6
    assert backend.constrained == 1 and backend.form_refusals == 0
    # negative control: reply_form=free sends no constraint
    with FaultServer(default=["advice"]) as server:
        _openai(server, "free").generate([_req("a")])
        assert not any(k in server.bodies[0] for k in ("structured_outputs", "response_format"))


def test_a_server_that_refuses_the_form_is_asked_again_without_it():
    with FaultServer(default=["advice"], refuse_forms=True) as server:
        backend = _openai(server, "regex")
        replies = backend.generate([_req("a")])
        replies += backend.generate([_req("b"), _req("c")])
        carried = ["structured_outputs" in b for b in server.bodies]
    assert all(r and r.startswith("<skill>Open every closed receptacle") for r in replies)  # no reply lost
    # the first request: refused with the form, answered without; later ones never carry it
    assert carried == [True, False, False, False] and backend.form_refusals == 1 and backend.failures == 0
    assert backend.constrained == 0


def test_a_plain_refusal_stays_a_failure_and_keeps_the_form():
    with FaultServer(default=["400"]) as server:
        backend = _openai(server, "regex")
        assert backend.generate([_req("a")]) == [None]
    assert backend.failures == 1 and backend.form_refusals == 0  # the form was not the problem


def test_json_replies_become_the_skill_form():
    assert skill_from_json(json.dumps({"skill": ["Open the drawer first.", "Then  take the knife."]})) == (
        "<skill>\n- Open the drawer first.\n- Then take the knife.\n</skill>")
    for text in ('{"skill": ["Open the dr', '{"other": 1}', "plain text", '["a"]'):
        assert skill_from_json(text) == text


def test_reply_form_settings_are_checked():
    with pytest.raises(ConfigError, match="reply_form='grammar' is invalid"):
        SkillDuetConfig(analyzer={"kind": "openai", "model": "m", "reply_form": "grammar"})
    with pytest.raises(ConfigError, match="reply_form='json_schema' is invalid.*reply_form=regex"):
        SkillDuetConfig(analyzer={"kind": "transformers", "model": "policy", "reply_form": "json_schema"})


def test_the_transformers_backend_decodes_in_the_form(tiny_model, tiny_tokenizer):
    pytest.importorskip("xgrammar")
    conversations = [[{"role": "user", "content": "put a clean knife in drawer."}],
                     [{"role": "user", "content": "heat some egg and put it in countertop."}]]
    requests = [ChatRequest(messages=m, form=SKILL_FORM) for m in conversations]

    def backend(form: str):
        return make_backend(BackendConfig(kind="transformers", model="policy", temperature=0.0, max_tokens=800,
                                          concurrency=2, reply_form=form),
                            policy_model=tiny_model, policy_tokenizer=tiny_tokenizer)

    constrained = backend("regex")
    replies = constrained.generate(requests)
    assert constrained.constrained == 2
    for reply in replies:
        assert re.fullmatch(SKILL_REGEX, reply), reply
    # negative control: the same untrained model without the form writes no <skill> block (the form is at most
    # 754 characters, so 800 tokens always close it)
    free = backend("free").generate(requests)
    assert not any(r and re.fullmatch(SKILL_REGEX, r) for r in free)
