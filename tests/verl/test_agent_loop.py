"""The ``skillduet_agent`` loop against a fake rollout server: masks, the injected Global, extra fields."""

from __future__ import annotations

import pytest

pytest.importorskip("verl")

from skillduet_plugin.core.conversation import ChatTokenizer  # noqa: E402
from skillduet_plugin.envs.toy import toy_initial_messages, toy_turn_message  # noqa: E402
from skillduet_plugin.skills.inject import GLOBAL_HEADER, insert_sections  # noqa: E402
from fakes import FakeGlobals, FakeServer, run_agent_loop, toy_agent_config  # noqa: E402

GLOBAL_TEXT = "- Procedure: open the box first, then take the key."


def _run(tokenizer, turns, task_id="toy-3", versions=None, **run_kwargs):
    server, globals_ = FakeServer(turns, steps=versions), FakeGlobals(GLOBAL_TEXT)
    out = run_agent_loop(tokenizer, server, globals_, toy_agent_config(), task_id=task_id, **run_kwargs)
    return out, server, globals_


def test_episode_tokens_masks_and_global(tiny_tokenizer):
    chat = ChatTokenizer(tiny_tokenizer)
    eos = chat.eos_token_id
    turn1 = chat.encode("<think>the key is in the box</think><action>open box</action>") + [eos]
    turn2 = chat.encode("<think>now take it</think><action>take key</action>") + [eos]
    out, server, globals_ = _run(tiny_tokenizer, [turn1, turn2])

    # the first prompt: the env's messages with the Global inserted at message level
    obs = "You are in a room with a box, a drawer and a fridge."
    admissible = ["look", "open box", "open drawer", "open fridge", "take key", "take apple", "take pen"]
    plain = toy_initial_messages("toy", task="take the key from the box.", observation=obs,
                                 admissible_actions=admissible)
    student = insert_sections(plain, [f"{GLOBAL_HEADER}\n{GLOBAL_TEXT}"], task="take the key from the box.")
    assert out.prompt_ids == chat.prompt_ids(student)
    text = tiny_tokenizer.decode(out.prompt_ids)
    assert text.index("Your task is to: take the key from the box.") < text.index(GLOBAL_HEADER) \
        < text.index(GLOBAL_TEXT)
    assert globals_.scopes == ["fetch"]

    # response = policy turn, environment turn (masked), policy turn
    env_turn = chat.turn_ids(toy_turn_message("toy", observation="You open box.", admissible_actions=admissible,
                                              step=2))
    assert out.response_ids == turn1 + env_turn + turn2
    assert out.response_mask == [1] * len(turn1) + [0] * len(env_turn) + [1] * len(turn2)
    assert out.response_logprobs == [-0.5] * len(turn1) + [0.0] * len(env_turn) + [-0.5] * len(turn2)
    # the second request continues the same sequence, one sticky session, turn budget respected
    assert server.calls[1]["prompt_ids"] == out.prompt_ids + turn1 + env_turn
    assert server.calls[0]["request_id"] == server.calls[1]["request_id"]
    assert all(c["sampling_params"]["max_tokens"] <= 64 for c in server.calls)

    assert out.reward_score == 1.0
    record = out.extra_fields["skillduet"]
    assert record["won"] is True and record["task_id"] == "toy-3" and record["scope"] == "fetch"
    assert record["actions"] == ["open box", "take key"] and record["valid"] == [True, True]
    assert record["prompt_messages"] == plain  # skill-free: the teacher inserts its Local skill here
    assert GLOBAL_TEXT not in str(record["prompt_messages"])
    assert record["global_version"] == 3
    assert out.extra_fields["skill_ids"] == ["global:fetch:v3"]
    assert out.extra_fields["skill_text"] == GLOBAL_TEXT


def test_group_index_is_the_session_of_the_sample_in_its_group(tiny_tokenizer):
    chat = ChatTokenizer(tiny_tokenizer)
    turns = [chat.encode(f"<action>{a}</action>") + [chat.eos_token_id] for a in ("open box", "take key")]
    indices = [_run(tiny_tokenizer, list(turns), session_id=k)[0].extra_fields["skillduet"]["group_index"]
               for k in (0, 2)]
    assert indices == [0, 2]  # verl V1 passes each of a prompt's rollout.n samples its session id
    assert _run(tiny_tokenizer, list(turns))[0].extra_fields["skillduet"]["group_index"] == 0  # no session: the first


def test_truncated_turn_gets_a_masked_eos_and_invalid_actions_are_penalised(tiny_tokenizer):
    chat = ChatTokenizer(tiny_tokenizer)
    rambling = chat.encode("<think>hmm</think> I am not sure")  # no eos, no action: cut and invalid
    out, _, _ = _run(tiny_tokenizer, [rambling] * 3, task_id="toy-0")
    first = len(rambling)
    assert out.response_ids[:first + 1] == rambling + [chat.eos_token_id]
    assert out.response_mask[:first + 1] == [1] * first + [0]
    record = out.extra_fields["skillduet"]
    assert record["num_turns"] == 3 and record["won"] is False and record["truncated"] is False
    assert out.reward_score == pytest.approx(-0.3)  # 3 invalid steps x 0.1, no env reward


def test_missing_task_id_names_the_dataset_builder(tiny_tokenizer):
    from skillduet_plugin.integrations.verl.agent_loop import _sample_task

    with pytest.raises(KeyError, match="integrations.verl.data"):
        _sample_task({"extra_info": {}})


def test_weight_versions_for_verl_staleness_metrics(tiny_tokenizer):
    """verl's V1 trainer reads min/max_global_steps of every sample (it crashed at the end of step 1 without)."""
    from skillduet_plugin.integrations.verl.agent_loop import weight_versions

    chat = ChatTokenizer(tiny_tokenizer)
    rambling = chat.encode("<think>hmm</think> I am not sure")
    out, _, _ = _run(tiny_tokenizer, [rambling] * 3, task_id="toy-0", versions=[4, 5, 5], global_steps=6)
    assert out.extra_fields["min_global_steps"] == 4 and out.extra_fields["max_global_steps"] == 5
    # no version reported (or no turn generated): the weights current when the batch was sampled
    out, _, _ = _run(tiny_tokenizer, [rambling] * 3, task_id="toy-0", global_steps=6)
    assert out.extra_fields["min_global_steps"] == 5 and out.extra_fields["max_global_steps"] == 5
    assert weight_versions([], None) == {"min_global_steps": 0, "max_global_steps": 0}
    assert weight_versions([], 1) == {"min_global_steps": 0, "max_global_steps": 0}
