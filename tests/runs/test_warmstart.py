"""Warm start: expert episodes are laid out token for token like RL rollouts, env tokens are masked, some
prompts carry a skill section, cloning lowers the loss, and the result is cached by its settings."""

from __future__ import annotations

import pytest

from skillduet_plugin.envs.prompts import initial_messages
from skillduet_plugin.rollout.collector import Generation, run_episodes
from skillduet_plugin.core.conversation import ChatTokenizer
from skillduet_plugin.warmstart.episodes import (analyzer_skill, build_cloning_data, clone, expert_response,
                                                 plan_skill_sections, play_expert)
from skillduet_plugin.warmstart.cache import cache_key, warm_start_model
from skillduet_plugin.skills.inject import GLOBAL_HEADER, LOCAL_HEADER, insert_sections, skill_section
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


def _clone_data(chat, records, *, max_total_tokens=8192, skill_fraction=0.0, seed=0, budget=64):
    plans = plan_skill_sections(records, "alfworld", skill_fraction=skill_fraction, skill_token_budget=budget,
                                seed=seed)
    return build_cloning_data(records, "alfworld", chat, max_total_tokens=max_total_tokens, plans=plans,
                              skill_token_budget=budget, skill_position="after_task")


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
    cloned = _clone_data(chat, records, max_total_tokens=8192, skill_fraction=0.0)
    generate = _scripted_generate(chat, records, [c.tokens.prompt_ids for c in cloned])
    rollouts = run_episodes(TASKS, env_name="alfworld", pool=FakePool(), generate_fn=generate, chat=chat,
                            max_turns=10, max_new_tokens=64, max_total_tokens=8192, action_selection="generate")
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
    [c] = _clone_data(chat, [rec], max_total_tokens=8192, skill_fraction=0.0)
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


def test_some_prompts_carry_a_local_or_a_global_skill_section_inserted_at_message_level(chat):
    records = _records(TASKS * 5)
    plans = plan_skill_sections(records, "alfworld", skill_fraction=0.5, skill_token_budget=64, seed=0)
    kinds = [p.kind if p else None for p in plans]
    assert kinds.count("local") > 0 and kinds.count("global") > 0 and kinds.count(None) > 0
    local_donors = [records[p.donor].task_id == rec.task_id for p, rec in zip(plans, records)
                    if p and p.kind == "local"]
    assert any(local_donors) and not all(local_donors)  # the same game and other games of the type
    cloned = build_cloning_data(records, "alfworld", chat, max_total_tokens=8192, plans=plans,
                                skill_token_budget=64, skill_position="after_task")
    plain = _clone_data(chat, records)
    for c, p, rec, plan in zip(cloned, plain, records, plans):
        assert c.with_skill == (plan is not None)
        if plan is None:
            assert c.tokens.prompt_ids == p.tokens.prompt_ids
            continue
        donor = records[plan.donor]
        assert donor.won and donor.scope == rec.scope
        header, budget = (LOCAL_HEADER, 96) if plan.kind == "local" else (GLOBAL_HEADER, 64)
        if plan.kind == "local":  # the analyzer's skill from another episode (of this game or another)
            assert plan.text == analyzer_skill(donor, "alfworld") and donor is not rec
            # its first line names where that episode took the target, exactly as its actions do
            assert plan.text.startswith("- In this game: ") and any(d.isdigit() for d in plan.text.split("\n")[0])
            class_level = plan.text.split("\n", 1)[1]
        else:  # a Global synthesized from other games of the task type: class-level text only
            assert donor.task_id != rec.task_id and plan.text.startswith("- ")
            assert "In this game" not in plan.text
            class_level = plan.text
        assert "Procedure for" in plan.text and not any(ch.isdigit() for ch in class_level.split("(e.g.")[0])
        section = skill_section(header, plan.text, budget, chat.tokenizer)
        assert f"Your task is to: {rec.task}\n{header}\n" in c.student_messages[0]["content"]
        assert c.student_messages == insert_sections(p.student_messages, [section], task=rec.task)
        # only the prompt changes: the episode's completion is the same tokens
        assert c.tokens.completion_ids == p.tokens.completion_ids
    with pytest.raises(ValueError, match="skill plans"):
        build_cloning_data(records, "alfworld", chat, max_total_tokens=8192, plans=plans[1:], skill_token_budget=64,
                           skill_position="after_task")


def test_max_turns_and_token_budget_truncate_like_the_collector(chat):
    [rec] = _records(TASKS[:1], max_turns=2)
    assert len(rec.actions) == 2 and not rec.won
    [full] = _clone_data(chat, _records(TASKS[:1]), max_total_tokens=8192, skill_fraction=0.0)
    budget = len(full.tokens) - 5
    [cut] = _clone_data(chat, _records(TASKS[:1]), max_total_tokens=budget, skill_fraction=0.0)
    assert len(cut.tokens) <= budget and not cut.won and len(cut.actions) < len(full.actions)


def test_clone_lowers_the_loss(tiny_model, chat):
    cloned = _clone_data(chat, _records(TASKS[:2]), max_total_tokens=8192, skill_fraction=0.0)
    stats = clone(tiny_model, cloned, steps=12, batch_size=2, learning_rate=1e-2,
                  pad_token_id=chat.pad_token_id)
    assert stats["steps"] == 12
    assert stats["loss_last"] < stats["loss_first"] - 0.5
    assert not tiny_model.training


def _stopped_clone(model, cloned, chat, *, stop_after, **kw):
    """Clone for 7 steps (3 episodes, batch 2: the shuffle reorders mid-run), checkpointing every 2, and stop
    with an exception right after step ``stop_after``; returns the checkpoints taken."""
    taken = []

    def on_step(k, _loss):
        if k == stop_after:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        clone(model, cloned, steps=7, batch_size=2, learning_rate=1e-2, pad_token_id=chat.pad_token_id,
              checkpoint_every=2, on_checkpoint=taken.append, on_step=on_step, **kw)
    return taken


def test_clone_resumed_from_a_checkpoint_ends_with_the_weights_of_an_uninterrupted_run(tiny_model, chat, tmp_path):
    """The state saved at step 4 (through torch.save and a weights-only load, as the cache stores it) continues
    to step 7 bit for bit; the same state without its AdamW moments, or without the shuffle's position, does
    not (so the comparison can fail)."""
    import copy

    import torch

    cloned = _clone_data(chat, _records(TASKS[:3]), max_total_tokens=8192, skill_fraction=0.0)
    start = copy.deepcopy(tiny_model.state_dict())

    def fresh():
        model = copy.deepcopy(tiny_model)
        model.load_state_dict(start)
        return model

    whole = fresh()
    stats = clone(whole, cloned, steps=7, batch_size=2, learning_rate=1e-2, pad_token_id=chat.pad_token_id)
    taken = _stopped_clone(fresh(), cloned, chat, stop_after=5)
    assert [t["step"] for t in taken] == [2, 4]
    torch.save(taken[-1], tmp_path / "clone.pt")
    state = torch.load(tmp_path / "clone.pt", weights_only=True)

    def resumed(state):
        model = fresh()
        out = clone(model, cloned, steps=7, batch_size=2, learning_rate=1e-2, pad_token_id=chat.pad_token_id,
                    resume=state)
        return model, out

    model, out = resumed(state)
    assert out["resumed_from"] == 4 and out["steps"] == 7 and stats["resumed_from"] is None
    assert out["loss_last"] == stats["loss_last"] and out["loss_first"] == stats["loss_first"]
    for name, value in whole.state_dict().items():
        assert torch.equal(model.state_dict()[name], value), name
    broken_optimizer = {**state, "optimizer": {**state["optimizer"], "state": {}}}
    broken_shuffle = {**state, "cursor": 0}
    for broken in (broken_optimizer, broken_shuffle):
        other, _ = resumed(broken)
        assert any(not torch.equal(other.state_dict()[k], v) for k, v in whole.state_dict().items())


def test_clone_refuses_a_checkpoint_of_another_budget(tiny_model, chat):
    cloned = _clone_data(chat, _records(TASKS[:3]), max_total_tokens=8192, skill_fraction=0.0)
    [state, _] = _stopped_clone(tiny_model, cloned, chat, stop_after=5)
    with pytest.raises(ValueError, match="steps=7, batch_size=2, this run has steps=9"):
        clone(tiny_model, cloned, steps=9, batch_size=2, learning_rate=1e-2, resume=state)


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

    from skillduet_plugin.warmstart.loss import cloning_loss

    records = _records(TASKS[:3])
    cloned = _clone_data(chat, records, max_total_tokens=8192, skill_fraction=0.5, seed=1)
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


def test_episode_gradients_sum_to_the_causal_lm_gradient_of_the_batch(tiny_model, chat):
    """Each step's gradient is the sum of unpadded per-episode gradients: equal to autograd through the plain
    causal-LM loss of the padded batch (the independent reference); a wrong normaliser fails it."""
    import torch

    from skillduet_plugin.warmstart.loss import episode_gradient, policy_tokens

    cloned = _clone_data(chat, _records(TASKS[:3]), max_total_tokens=8192, skill_fraction=0.5, seed=1)
    assert len({len(c.tokens) for c in cloned}) > 1
    count = policy_tokens(cloned)
    parts = [episode_gradient(tiny_model, ep, count, chat.pad_token_id) for ep in cloned]
    ours = sum(g for _, g in parts)
    ids, attn, labels = batch_tensors(cloned, pad_token_id=chat.pad_token_id)
    reference = tiny_model(input_ids=ids, attention_mask=attn, labels=labels).loss
    ref = torch.cat([g.reshape(-1) for g in torch.autograd.grad(reference, list(tiny_model.parameters()))])
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-7)
    torch.testing.assert_close(torch.tensor(sum(n for n, _ in parts) / count), reference.detach(), rtol=1e-5,
                               atol=1e-6)
    wrong = sum(episode_gradient(tiny_model, ep, count // 2, chat.pad_token_id)[1] for ep in cloned)
    assert not torch.allclose(wrong, ref, rtol=1e-3, atol=1e-6)  # negative control: the normaliser matters
    with pytest.raises(ValueError, match="no policy tokens"):
        policy_tokens([])


def test_two_cloning_workers_train_the_same_weights_as_one_process(tiny_model_dir, chat):
    """The worker count is a speed setting only: 2 spawned workers give bit-for-bit the weights of 1 process."""
    import torch
    from transformers import AutoModelForCausalLM

    cloned = _clone_data(chat, _records(TASKS), max_total_tokens=8192, skill_fraction=0.5, seed=1)
    weights, stats = [], []
    for workers in (1, 2):
        model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
        stats.append(clone(model, cloned, steps=4, batch_size=3, learning_rate=1e-2, seed=3, workers=workers,
                           model_dir=tiny_model_dir, pad_token_id=chat.pad_token_id))
        weights.append({k: v.clone() for k, v in model.state_dict().items()})
    assert stats[1]["workers"] == 2 and stats[0]["loss_last"] == stats[1]["loss_last"]
    for k, v in weights[0].items():
        assert torch.equal(v, weights[1][k]), k
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).state_dict()
    assert any(not torch.equal(v, base[k]) for k, v in weights[0].items())  # it trained


def test_a_cloning_worker_that_cannot_load_the_model_stops_the_warm_start(tiny_model, chat, tmp_path):
    cloned = _clone_data(chat, _records(TASKS[:2]), max_total_tokens=8192)
    with pytest.raises(RuntimeError, match="cloning worker 0 failed"):
        clone(tiny_model, cloned, steps=1, batch_size=2, learning_rate=1e-2, workers=2, model_dir=tmp_path)
    with pytest.raises(ValueError, match="needs model_dir"):
        clone(tiny_model, cloned, steps=1, batch_size=2, learning_rate=1e-2, workers=2)


def test_cloning_workers_auto_uses_the_cores_for_a_long_warm_start_only(monkeypatch):
    import os

    from skillduet_plugin.warmstart.workers import POOL_MIN_STEPS
    from skillduet_plugin.runs.config import RunConfig
    from skillduet_plugin.runs.trl_runner import cloning_workers

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    config = RunConfig(threads=1)
    assert config.warm_start.workers == 0 and config.warm_start.steps >= POOL_MIN_STEPS
    assert cloning_workers(config) == 2  # 2 cores at 1 thread each
    config.warm_start.batch_size = 1
    assert cloning_workers(config) == 1  # never more workers than episodes per step
    config.warm_start.batch_size, config.warm_start.steps = 4, POOL_MIN_STEPS - 1
    assert cloning_workers(config) == 1  # a short warm start is not worth the start-up
    config.warm_start.workers = 3
    assert cloning_workers(config) == 3  # an explicit count wins
    assert cloning_workers(RunConfig(threads=2)) == 1  # 2 cores hold one 2-thread process
