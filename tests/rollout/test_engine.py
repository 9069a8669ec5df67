"""The episode state machine on its own: the log-prob rule, the scope setting, call order, the record round trip."""

from __future__ import annotations

import pytest

from skillduet_plugin.core.conversation import ChatTokenizer
from skillduet_plugin.rollout.engine import (EpisodeEngine, Generation, episode_from_record, episode_record,
                                             to_trajectory)
from skillduet_plugin.envs.toy import ToyEnv


@pytest.fixture()
def chat(tiny_tokenizer):
    return ChatTokenizer(tiny_tokenizer)


def _engine(chat, **kw):
    args = dict(max_turns=3, max_new_tokens=32, max_total_tokens=4096, scope="task_type", action_selection="generate")
    args.update(kw)
    return EpisodeEngine("toy", chat, **args)


def _play(engine, chat, task_id, turns):
    """Drive one episode against a ToyEnv: ``turns`` is a list of (text, logps-or-None per token)."""
    env = ToyEnv()
    obs, info = env.reset(task_id)
    state = engine.start(task_id, obs, info)
    for text, with_logps in turns:
        request = state.next_request()
        if request is None:
            break
        ids = chat.encode(text) + [chat.eos_token_id]
        action = state.on_generation(Generation(ids, [-0.5] * len(ids) if with_logps else None))
        state.on_step(*env.step(action))
    return state


def test_an_episode_has_log_probs_only_when_every_turn_had_them(chat):
    """The rule is the same for the collector and the agent loop: one turn without log-probs drops them all
    (before, the collector let the last turn decide and handed Strength 0.0 placeholders as log-probs)."""
    turns = [("<action>open box</action>", True), ("<action>take key</action>", True)]
    full = _play(_engine(chat), chat, "toy-3", turns)
    assert full.episode.has_logps and full.episode.won
    traj = to_trajectory(full.episode, step=1, traj_id="a")
    mask = traj.completion_mask
    assert [lp for lp, m in zip(traj.base_logps, mask) if m] == [-0.5] * sum(mask)
    assert all(lp == 0.0 for lp, m in zip(traj.base_logps, mask) if not m)  # env tokens carry placeholders

    mixed = _play(_engine(chat), chat, "toy-3", [("<action>open box</action>", False),
                                                 ("<action>take key</action>", True)])
    assert mixed.episode.won and not mixed.episode.has_logps
    assert to_trajectory(mixed.episode, step=1, traj_id="b").base_logps is None


@pytest.mark.parametrize("setting,expected", [("task_type", "fetch"), ("task", "toy-3"), ("single", "all")])
def test_scope_follows_the_setting_and_task_type_is_kept(chat, setting, expected):
    state = _play(_engine(chat, scope=setting), chat, "toy-3", [])
    assert state.episode.scope == expected and state.episode.task_type == "fetch"


def test_a_bad_scope_fails_before_any_episode(chat):
    with pytest.raises(ValueError, match="scope='game' is invalid"):
        _engine(chat, scope="game")


def test_calls_out_of_order_are_refused(chat):
    env = ToyEnv()
    state = _engine(chat).start("toy-0", *env.reset("toy-0"))
    with pytest.raises(RuntimeError, match="on_generation"):
        state.on_step("x", 0.0, False, {})
    with pytest.raises(RuntimeError, match="next_request"):
        state.on_generation(Generation([1]))
    assert state.next_request() is state.next_request()  # asking twice is the same request
    state.on_generation(Generation(chat.encode("<action>look</action>")))
    with pytest.raises(RuntimeError, match="on_step"):
        state.next_request()


def test_the_record_round_trip_gives_the_same_trajectory(chat):
    state = _play(_engine(chat), chat, "toy-3", [("<action>look</action>", True), ("<action>open box</action>", True),
                                                 ("<action>take key</action>", True)])
    ep = state.episode
    again = episode_from_record(episode_record(ep), prompt_ids=ep.tokens.prompt_ids,
                                completion_ids=ep.tokens.completion_ids, completion_mask=ep.tokens.completion_mask,
                                completion_logps=ep.tokens.completion_logps)
    assert to_trajectory(again, step=2, traj_id="x").to_dict() == to_trajectory(ep, step=2, traj_id="x").to_dict()
    # without the log-probs the record never claims them
    bare = episode_from_record(episode_record(ep), prompt_ids=ep.tokens.prompt_ids,
                               completion_ids=ep.tokens.completion_ids, completion_mask=ep.tokens.completion_mask)
    assert not bare.has_logps and to_trajectory(bare, step=2, traj_id="x").base_logps is None
