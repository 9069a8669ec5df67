"""One episode engine: the same scripted episode played through the TRL collector (lockstep, a generate_fn) and
through the verl agent loop (async, a fake rollout server) gives the same Trajectory and the same analyzer request,
under every ``scope`` setting."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("verl")

import torch  # noqa: E402

from skillduet_plugin.config import SkillDuetConfig  # noqa: E402
from skillduet_plugin.integrations.verl.batch import build_trajectories  # noqa: E402
from skillduet_plugin.rollout.collector import Generation, run_episodes, to_trajectory  # noqa: E402
from skillduet_plugin.core.conversation import ChatTokenizer  # noqa: E402
from skillduet_testing.toy_pool import ToyPool  # noqa: E402
from skillduet_plugin.skills.bank import SkillBank  # noqa: E402
from skillduet_plugin.skills.extract import plan_jobs  # noqa: E402
from skillduet_plugin.skills.lifecycle import SkillLifecycle  # noqa: E402
from fakes import FakeGlobals, FakeServer, run_agent_loop, toy_agent_config  # noqa: E402

# toy-3 ("take the key from the box"): a wasted look, a turn that never emits eos (closed by a masked eos), the win.
SCRIPT = [("<think>where is it</think><action>look</action>", True),
          ("<think>the key is in the box</think><action>open box</action> then", False),
          ("<action>take key</action>", True)]
LOGPS = [-0.5, -0.25, -0.125]  # exact in float32, so the verl tensors round-trip them
GLOBAL_TEXT = "- Procedure: open the box first, then take the key."
INITIAL_OBS = "You are in a room with a box, a drawer and a fridge."
SCOPES = {"task_type": "fetch", "task": "toy-3", "single": "all"}


def _turns(chat):
    return [chat.encode(text) + ([chat.eos_token_id] if eos else []) for text, eos in SCRIPT]


def _lifecycle(tmp_path, tokenizer, scope_setting):
    bank = SkillBank(tmp_path / "bank.sqlite")
    bank.commit_consolidation(2, [{"scope": SCOPES[scope_setting], "items": [GLOBAL_TEXT], "text": GLOBAL_TEXT,
                                   "selector": "strength", "report": {}}])
    bank.close()
    return SkillLifecycle(SkillDuetConfig(scope=scope_setting), tmp_path / "bank.sqlite", tokenizer=tokenizer)


def _trl_trajectory(chat, lifecycle):
    turns = _turns(chat)

    def generate(contexts, max_new_tokens):
        ids = turns.pop(0)
        return [Generation(ids, [LOGPS[2 - len(turns)]] * len(ids))]

    (ep,) = run_episodes(["toy-3"], env_name="toy", pool=ToyPool(), generate_fn=generate, chat=chat,
                         lifecycle=lifecycle, max_turns=3, max_new_tokens=64, max_total_tokens=1 << 20,
                         max_completion_tokens=400, action_selection="generate")
    return to_trajectory(ep, step=1, traj_id="1-toy-3-0")


def _verl_trajectory(chat, lifecycle, scope_setting, key="1-toy-3-0"):
    server = FakeServer(_turns(chat), logps=LOGPS)
    globals_ = FakeGlobals(lookup=lifecycle.global_for)
    out = run_agent_loop(chat.tokenizer, server, globals_, toy_agent_config(f"skillduet.scope={scope_setting}"))
    assert globals_.scopes == [SCOPES[scope_setting]]  # the Global of the configured scope was read
    # exactly what the skillduet_sync trainer does with the TransferQueue rows (old log-probs = rollout's here)
    [(_, traj)] = build_trajectories([key], [out.extra_fields["skillduet"]], [torch.tensor(out.prompt_ids)],
                                     [torch.tensor(out.response_ids)], [torch.tensor(out.response_mask)],
                                     [torch.tensor(out.response_logprobs)], step=1)
    return traj, out


def _analyzer_text(traj, tokenizer):
    [job] = plan_jobs([traj], env="toy", tokenizer=tokenizer)[0]
    return "\n".join(m["content"] for m in job.request.messages)


@pytest.mark.parametrize("scope_setting", list(SCOPES))
def test_collector_and_agent_loop_give_the_same_trajectory(tiny_tokenizer, tmp_path, scope_setting):
    chat = ChatTokenizer(tiny_tokenizer)
    lifecycle = _lifecycle(tmp_path, tiny_tokenizer, scope_setting)
    trl = _trl_trajectory(chat, lifecycle)
    verl, out = _verl_trajectory(chat, lifecycle, scope_setting)

    for name in ("prompt_ids", "completion_ids", "completion_mask", "base_logps", "scope", "task_id", "task",
                 "messages", "prompt_messages", "responses", "reward", "success", "global_version"):
        assert getattr(trl, name) == getattr(verl, name), name
    for key in ("actions", "observations", "initial_observation", "valid", "num_turns", "truncated", "env"):
        assert trl.metadata[key] == verl.metadata[key], key
    assert trl.to_dict() == verl.to_dict()  # nothing else differs either

    # the shared episode is the scripted one (so the equality above is not between two empty things)
    assert trl.scope == SCOPES[scope_setting] and trl.global_version == 1 and trl.success
    assert GLOBAL_TEXT in tiny_tokenizer.decode(trl.prompt_ids)
    assert trl.metadata["actions"] == ["look", "open box", "take key"]
    assert trl.metadata["observations"] == ["Nothing happens.", "You open box.", "You take key."]
    assert trl.metadata["initial_observation"] == INITIAL_OBS
    policy = sum(trl.completion_mask)
    assert policy == sum(len(t) for t in _turns(chat))  # the closing eos of turn 2 is not the policy's
    assert sorted(set(lp for lp, m in zip(trl.base_logps, trl.completion_mask) if m)) == sorted(LOGPS)
    assert out.reward_score == 1.0 and out.num_turns == 7

    # the analyzer reads the same request on both paths, turns aligned with their observations
    text = _analyzer_text(trl, tiny_tokenizer)
    assert text == _analyzer_text(verl, tiny_tokenizer)
    assert f"Initial observation: {INITIAL_OBS}" in text
    assert "Step 1. Action: look\nObservation: Nothing happens." in text
    assert "Step 3. Action: take key\nObservation: You take key." in text


def test_a_transfer_queue_key_orders_by_task_and_session_not_by_the_random_uid(tiny_tokenizer, tmp_path):
    """verl's keys are ``{uid}_{session}_{index}`` with a uid drawn per run: the order id (what held-out sets and
    pair ties sort by) is the task with the rest, equal for two runs that drew other uids."""
    chat = ChatTokenizer(tiny_tokenizer)
    lifecycle = _lifecycle(tmp_path, tiny_tokenizer, "task_type")
    one, _ = _verl_trajectory(chat, lifecycle, "task_type", key="dd556134-5514_2_0")
    two, _ = _verl_trajectory(chat, lifecycle, "task_type", key="dfcd21d8-3caf_2_0")
    assert one.traj_id != two.traj_id and one.order_id == two.order_id == "toy-3_2_0"
    assert one.order_key < ("toy-3_3_0", "")  # sorts by the order id first


def test_the_old_verl_record_mapping_misaligns_the_analyzer_input(tiny_tokenizer, tmp_path):
    """Negative control: mapping the agent loop's record as it used to be (observations[0] = the initial
    observation, no initial_observation) changes the request, so the parity assertion above can fail."""
    chat = ChatTokenizer(tiny_tokenizer)
    lifecycle = _lifecycle(tmp_path, tiny_tokenizer, "task_type")
    verl, out = _verl_trajectory(chat, lifecycle, "task_type")
    record = out.extra_fields["skillduet"]
    old = dataclasses.replace(verl, metadata={**verl.metadata, "observations": list(record["observations"]),
                                              "initial_observation": ""})
    text = _analyzer_text(old, tiny_tokenizer)
    assert text != _analyzer_text(verl, tiny_tokenizer)
    assert f"Step 1. Action: look\nObservation: {INITIAL_OBS}" in text


def test_an_episode_without_a_generated_turn_still_reports_weight_versions(tiny_tokenizer):
    """verl's V1 trainer copies min/max_global_steps into every sample's tags and fails on None: the budget is
    spent before the first turn, so no server answer carries a version."""
    chat = ChatTokenizer(tiny_tokenizer)
    tight = toy_agent_config("actor_rollout_ref.rollout.response_length=1")
    server = FakeServer(_turns(chat), steps=[7, 7, 7])
    out = run_agent_loop(tiny_tokenizer, server, FakeGlobals(GLOBAL_TEXT), tight, global_steps=3)
    assert server.calls == [] and out.response_ids == [] and out.extra_fields["skillduet"]["truncated"]
    assert (out.extra_fields["min_global_steps"], out.extra_fields["max_global_steps"]) == (2, 2)
