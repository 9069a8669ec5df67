"""Warm start: expert episodes are laid out token for token like RL rollouts, env tokens are masked, some
prompts carry a skill section, cloning lowers the loss, and the result is cached by its settings."""

from __future__ import annotations

import pytest

from skillduet_plugin.envs.prompts import initial_messages
from skillduet_plugin.rollout.collector import Generation, run_episodes
from skillduet_plugin.core.conversation import ChatTokenizer
from skillduet_plugin.runs.warmstart import (build_cloning_data, clone, expert_response, play_expert,
                                             procedure_text)
from skillduet_plugin.runs.warmstart_cache import cache_key, warm_start_model
from skillduet_plugin.skills.inject import GLOBAL_HEADER, insert_sections, skill_section
from runs_fakes import FAKE_TASKS, FakeAlfworld, FakePool

TASKS = list(FAKE_TASKS)


def batch_tensors(batch, pad_token_id=0):
    """The plain causal-LM view of cloned episodes (the independent reference for the cloning loss):
    ``(input_ids, attention_mask, labels)``, right-padded; labels are the policy tokens, -100 elsewhere."""
    import torch

    width = max(len(ep.tokens) for ep in batch)
    ids = torch.full((len(batch), width), pad_token_id, dtype=torch.long)
    attn = torch.zeros((len(batch), width), dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    for row, ep in enumerate(batch):
        seq = ep.tokens.prompt_ids + ep.tokens.completion_ids
        ids[row, :len(seq)] = torch.tensor(seq)
        attn[row, :len(seq)] = 1
        p = len(ep.tokens.prompt_ids)
        target = torch.tensor(ep.tokens.completion_ids, dtype=torch.long)
        mask = torch.tensor(ep.tokens.completion_mask, dtype=torch.bool)
        labels[row, p:p + len(target)] = torch.where(mask, target, torch.full_like(target, -100))
    return ids, attn, labels


@pytest.fixture()
def chat(tiny_tokenizer):
    return ChatTokenizer(tiny_tokenizer)


def _records(tasks=TASKS, max_turns=10):
    env = FakeAlfworld()
    return [play_expert(env, t, max_turns=max_turns) for t in tasks]


def _scripted_generate(chat, records, student_prompts):
    """A generate_fn replaying each episode's expert responses (identified by its prompt tokens)."""
    queues = {tuple(p): [chat.encode(expert_response(a)) + [chat.eos_token_id] for a in rec.actions]
              for p, rec in zip(student_prompts, records)}

    def generate(contexts, max_new_tokens):
        out = []
        for ctx in contexts:
            key = next(k for k in queues if tuple(ctx[:len(k)]) == k)
            out.append(Generation(token_ids=queues[key].pop(0)[:max_new_tokens]))
        return out

    return generate


def test_expert_episode_tokens_equal_a_rollout(chat):
    records = _records()
    assert all(r.won for r in records)
    cloned = build_cloning_data(records, "alfworld", chat, max_total_tokens=8192, skill_fraction=0.0,
                                skill_token_budget=64)
    generate = _scripted_generate(chat, records, [c.tokens.prompt_ids for c in cloned])
    rollouts = run_episodes(TASKS, env_name="alfworld", pool=FakePool(), generate_fn=generate, chat=chat,
                            max_turns=10, max_new_tokens=64, max_total_tokens=8192)
    for c, ep in zip(cloned, rollouts):
        assert ep.won and c.won
        assert c.tokens.prompt_ids == ep.tokens.prompt_ids
        assert c.tokens.completion_ids == ep.tokens.completion_ids
        assert c.tokens.completion_mask == ep.tokens.completion_mask
        assert c.messages == ep.messages
    # the first prompt is exactly envs.prompts.initial_messages of the first observation
    env = FakeAlfworld()
    obs, info = env.reset(TASKS[0])
    expected = initial_messages("alfworld", task=info["task"], observation=obs,
                                admissible_actions=info["admissible_actions"])
    assert cloned[0].student_messages == expected


def test_policy_turns_are_think_action_and_env_turns_are_masked(chat):
    [rec] = _records(TASKS[:1])
    [c] = build_cloning_data([rec], "alfworld", chat, max_total_tokens=8192, skill_fraction=0.0,
                             skill_token_budget=64)
    ids, mask = c.tokens.completion_ids, c.tokens.completion_mask
    segments, cur = [], [ids[0]]
    for k in range(1, len(ids)):  # split the completion into runs of equal mask
        if mask[k] != mask[k - 1]:
            segments.append((mask[k - 1], cur))
            cur = []
        cur.append(ids[k])
    segments.append((mask[-1], cur))
    policy = [s for m, s in segments if m == 1]
    env_turns = [s for m, s in segments if m == 0]
    assert len(policy) == len(rec.actions) == 4 and len(env_turns) == 3
    for seg, action in zip(policy, rec.actions):
        assert seg[-1] == chat.eos_token_id
        assert chat.tokenizer.decode(seg[:-1]) == f"<think>{expert_response(action)[7:].split('</think>')[0]}" \
            f"</think><action>{action}</action>"
    assert "You are now at step 2" in chat.tokenizer.decode(env_turns[0])
    # labels: the loss sees policy tokens only
    _, attn, labels = batch_tensors([c], pad_token_id=chat.pad_token_id)
    p = len(c.tokens.prompt_ids)
    assert (labels[0, :p] == -100).all()
    for k, (tok, m) in enumerate(zip(ids, mask)):
        assert int(labels[0, p + k]) == (tok if m else -100)
    assert int(attn.sum()) == len(c.tokens)


def test_some_prompts_carry_a_skill_section_inserted_at_message_level(chat):
    records = _records(TASKS * 5)
    cloned = build_cloning_data(records, "alfworld", chat, max_total_tokens=8192, skill_fraction=0.5,
                                skill_token_budget=64, seed=0)
    with_skill = [c for c in cloned if c.with_skill]
    assert 0 < len(with_skill) < len(cloned)
    plain = build_cloning_data(records, "alfworld", chat, max_total_tokens=8192, skill_fraction=0.0,
                               skill_token_budget=64)
    for c, p, rec in zip(cloned, plain, records):
        if not c.with_skill:
            assert c.tokens.prompt_ids == p.tokens.prompt_ids
            continue
        content = c.student_messages[0]["content"]
        task_line = f"Your task is to: {rec.task}\n"
        assert f"{task_line}{GLOBAL_HEADER}\n- Procedure: " in content
        text = content.split(f"{GLOBAL_HEADER}\n", 1)[1].split("\n\n", 1)[0]
        # a procedure of another game of the same type, without instance numbers
        assert not any(ch.isdigit() for ch in text)
        section = skill_section(GLOBAL_HEADER, text, 64, chat.tokenizer)
        assert c.student_messages == insert_sections(p.student_messages, [section], task=rec.task)
        # only the prompt changes: the episode's completion is the same tokens
        assert c.tokens.completion_ids == p.tokens.completion_ids


def test_procedure_text_strips_instances_and_repeats():
    assert procedure_text(["go to desk 1", "go to desk 1", "take mug 2 from desk 1"]) == \
        "- Procedure: go to desk, then take mug from desk."


def test_max_turns_and_token_budget_truncate_like_the_collector(chat):
    [rec] = _records(TASKS[:1], max_turns=2)
    assert len(rec.actions) == 2 and not rec.won
    [full] = build_cloning_data(_records(TASKS[:1]), "alfworld", chat, max_total_tokens=8192, skill_fraction=0.0,
                                skill_token_budget=64)
    budget = len(full.tokens) - 5
    [cut] = build_cloning_data(_records(TASKS[:1]), "alfworld", chat, max_total_tokens=budget,
                               skill_fraction=0.0, skill_token_budget=64)
    assert len(cut.tokens) <= budget and not cut.won and len(cut.actions) < len(full.actions)


def test_clone_lowers_the_loss(tiny_model, chat):
    cloned = build_cloning_data(_records(TASKS[:2]), "alfworld", chat, max_total_tokens=8192, skill_fraction=0.0,
                                skill_token_budget=64)
    stats = clone(tiny_model, cloned, steps=12, batch_size=2, learning_rate=1e-2,
                  pad_token_id=chat.pad_token_id)
    assert stats["steps"] == 12
    assert stats["loss_last"] < stats["loss_first"] - 0.5
    assert not tiny_model.training


def test_cache_key_depends_on_every_setting():
    base = {"model": "m", "games": 3, "steps": 5}
    assert cache_key(base) == cache_key(dict(reversed(list(base.items()))))
    assert cache_key(base) != cache_key({**base, "steps": 6})
    assert len(cache_key(base)) == 16


def test_warm_start_is_cached(tiny_model_dir, tmp_path):
    calls = []

    def make_env(n):
        calls.append(n)
        return FakeAlfworld(TASKS[:n])

    kwargs = dict(env_name="alfworld", make_env=make_env, games=2, steps=2, batch_size=2, learning_rate=1e-3,
                  skill_fraction=0.5, max_turns=6, max_total_tokens=4096, skill_token_budget=64,
                  skill_position="after_task", seed=0, cache_root=tmp_path, env_identity={"fake": 1},
                  log=lambda m: None)
    out1, info1 = warm_start_model(tiny_model_dir, **kwargs)
    out2, info2 = warm_start_model(tiny_model_dir, **kwargs)
    assert out1 == out2 and not info1["cached"] and info2["cached"] and calls == [2]
    assert info1["steps"] == 2 and info1["episodes"] == 2
    assert (out1 / "model.safetensors").is_file() and (out1 / "tokenizer.json").is_file()
    out3, _ = warm_start_model(tiny_model_dir, **{**kwargs, "steps": 3})
    assert out3 != out1


def test_cloning_loss_equals_the_causal_lm_loss_on_the_labels(tiny_model, chat):
    import torch

    from skillduet_plugin.runs.warmstart import cloning_loss

    records = _records(TASKS[:3])
    cloned = build_cloning_data(records, "alfworld", chat, max_total_tokens=8192, skill_fraction=0.5,
                                skill_token_budget=64, seed=1)
    ids, attn, labels = batch_tensors(cloned, pad_token_id=chat.pad_token_id)
    assert len({len(c.tokens) for c in cloned}) > 1  # padding is exercised
    tiny_model.eval()
    reference = tiny_model(input_ids=ids, attention_mask=attn, labels=labels).loss
    ours = cloning_loss(tiny_model, cloned, pad_token_id=chat.pad_token_id)
    torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-5)
    grads = torch.autograd.grad(ours, list(tiny_model.parameters()), allow_unused=True)
    ref_grads = torch.autograd.grad(tiny_model(input_ids=ids, attention_mask=attn, labels=labels).loss,
                                    list(tiny_model.parameters()), allow_unused=True)
    for g, r in zip(grads, ref_grads):
        if r is not None:
            torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-6)
