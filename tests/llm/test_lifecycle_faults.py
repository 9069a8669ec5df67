"""The skill lifecycle against analyzer/synthesizer servers on 127.0.0.1 that hang, fail, send garbage, lone
surrogates or megabytes: every step completes, failures are counted, the request loop stays bounded, the bank
stays valid UTF-8 and every prompt keeps its chat structure. The figures are in docs/reliability.md."""

from __future__ import annotations

import time

import pytest
import torch
from llm_fault_server import FaultServer

from skillduet_plugin.config import BackendConfig, SkillDuetConfig
from skillduet_plugin.llm import make_backend
from skillduet_plugin.core.conversation import ChatTokenizer
from skillduet_plugin.skills.bank import BANK_FILENAME
from skillduet_plugin.skills.lifecycle import SkillLifecycle
from skillduet_plugin.skills.types import Trajectory

FAULTS = ["hang", "500", "garbage", "malformed", "drop", "surrogate", "huge", "advice"]
MAX_RETRIES = 1
FAILING = ("hang", "500", "garbage", "malformed", "drop")
# the exact requests the server sees in 2 steps, (analyzer, synthesizer): 2 analyzer requests (1 per step), each
# tried max_retries + 1 = 2 times on a failure, once on the hang (a timed-out reply is not asked again) and once
# on a usable reply; a synthesizer request per consolidation (2), and 2 more where the 6.6 MB reply's Global is
# compressed to its item budget
ATTEMPTS = {"hang": (2, 0), "500": (4, 0), "garbage": (4, 0), "malformed": (4, 0), "drop": (4, 0),
            "surrogate": (2, 2), "huge": (2, 4), "advice": (2, 2)}


def _backend(server: FaultServer):
    return make_backend(BackendConfig(kind="openai", model="m", base_url=server.base_url, timeout_s=1.5,
                                      max_retries=MAX_RETRIES, backoff_s=0.01, concurrency=4))


def _trajs(chat: ChatTokenizer, step: int) -> list[Trajectory]:
    out = []
    for k in range(2):
        task = "cool some apple and put it in fridge."
        msgs = [{"role": "user", "content": f"Welcome.\nYour task is to: {task}\nAct now."}]
        ids = chat.encode("<action>look</action>") + [chat.eos_token_id]
        out.append(Trajectory(traj_id=f"{step}-{k}", task_id="t1", scope="cool", task=task, step=step,
                              success=k == 0, reward=float(k == 0), prompt_messages=msgs,
                              messages=msgs + [{"role": "assistant", "content": "<action>look</action>"}],
                              responses=["<action>look</action>"], prompt_ids=chat.prompt_ids(msgs),
                              completion_ids=ids, completion_mask=[1] * len(ids), base_logps=[-1.0] * len(ids),
                              metadata={"actions": ["look"], "observations": ["nothing"], "env": "alfworld"}))
    return out


@pytest.mark.parametrize("fault", FAULTS)
def test_a_faulty_server_never_stops_a_step(fault, tmp_path, tiny_tokenizer):
    with FaultServer(default=[fault], hang_s=3.0) as server:
        lc = SkillLifecycle(SkillDuetConfig(consolidation_interval=1, skill_token_budget=64),
                            tmp_path / BANK_FILENAME, tokenizer=tiny_tokenizer, analyzer=_backend(server),
                            synthesizer=_backend(server), similarity=None)
        chat = ChatTokenizer(tiny_tokenizer)
        start = time.monotonic()
        for step in (1, 2):
            trajs = _trajs(chat, step)
            result = lc.extract(trajs, step)
            lc.score(result.skills, trajs,
                     lambda cs, rs: [torch.full((len(r),), -1.0 + 0.001 * len(c)) for c, r in zip(cs, rs)])
            lc.end_step(step)
        elapsed = time.monotonic() - start
        metrics = lc.metrics()
        analyzer = sum(n for key, n in server.attempts.items() if key.startswith("Task: "))
        assert (analyzer, sum(server.attempts.values()) - analyzer) == ATTEMPTS[fault]  # bounded, no retry storm
        for skill in lc.bank.candidates():
            skill.text.encode("utf-8")
            assert "\ufffd" not in skill.text and len(skill.text) <= lc.config.max_skill_chars
        teacher = [lc.teacher_messages(t.prompt_messages, task=t.task, scope="cool", local_skill=s)
                   for t in trajs for s in result.skills]
        for msgs in teacher + [lc.student_messages(trajs[0].prompt_messages, task=trajs[0].task, scope="cool")]:
            ids = chat.prompt_ids(msgs)
            specials = [i for i in ids if i in set(tiny_tokenizer.all_special_ids)]
            assert len(specials) == len([i for i in trajs[0].prompt_ids if i in set(tiny_tokenizer.all_special_ids)])
        lc.close()
    failed = metrics["skills/analyzer_backend_failures"]
    if fault in FAILING:
        assert failed == 2 and not result.skills  # each step's analyzer request counted, no skill, training goes on
    else:
        assert failed == 0 and result.skills
    if fault == "surrogate":
        assert [s.text for s in result.skills] == ["Open the fridge before you cool the apple."]
    print(f"fault {fault}: 2 steps in {elapsed:.2f}s, {sum(server.attempts.values())} requests, "
          f"{failed:.0f} analyzer failures")
