"""Lockstep episode collection: token/mask layout, stopping rules, Global injection, HF sampling."""

from __future__ import annotations

import pytest
import torch

from skillduet_plugin.rollout.collector import Generation, hf_generate_fn, run_episodes, to_trajectory
from skillduet_plugin.core.conversation import ChatTokenizer
from skillduet_plugin.envs.toy import toy_turn_message
from skillduet_testing.toy_pool import ToyPool
from skillduet_plugin.skills.types import GlobalSkills


class ScriptedGenerator:
    """Answers every context with the next scripted text per call (one text per episode per call)."""

    def __init__(self, chat, script, eos=True):
        self.chat, self.script, self.eos, self.calls = chat, list(script), eos, []

    def __call__(self, contexts, max_new_tokens):
        self.calls.append((len(contexts), max_new_tokens))
        texts = self.script.pop(0)
        out = []
        for text in texts:
            ids = self.chat.encode(text) + ([self.chat.eos_token_id] if self.eos else [])
            out.append(Generation(ids[:max_new_tokens], None))
        return out


class FakeLifecycle:
    def __init__(self, text="- Procedure: open the box first.", version=3):
        self.text, self.version = text, version

    def global_for(self, scope):
        return GlobalSkills(scope=scope, version=self.version, text=self.text)

    def student_messages(self, prompt_messages, *, task, scope):
        out = [dict(m) for m in prompt_messages]
        out[-1]["content"] += f"\n## Skills\n{self.text}"
        return out


@pytest.fixture()
def chat(tiny_tokenizer):
    return ChatTokenizer(tiny_tokenizer)


def _run(chat, gen, tasks, pool=None, **kw):
    args = dict(env_name="toy", pool=pool or ToyPool(), generate_fn=gen, chat=chat, max_turns=3,
                max_new_tokens=32, max_total_tokens=2048, action_selection="generate")
    args.update(kw)
    return run_episodes(tasks, **args)


def test_tokens_masks_and_record_follow_the_conversation(chat):
    gen = ScriptedGenerator(chat, [
        ["<action>open box</action>", "<action>dance</action>"],  # toy-3: right first step; toy-0: invalid
        ["<action>take key</action>", "<action>open box</action>"],
    ])
    ep3, ep0 = _run(chat, gen, ["toy-3", "toy-0"])
    assert gen.calls == [(2, 32), (2, 32)]
    assert (ep3.won, ep3.reward, ep3.num_turns, ep3.truncated) == (True, 1.0, 2, False)
    assert (ep0.won, ep0.reward, ep0.num_turns) == (True, 1.0, 2)
    assert ep3.actions == ["open box", "take key"] and ep3.valid == [True, True]
    assert ep0.valid == [False, True] and ep0.invalid_actions == 1
    assert ep3.scope == "fetch" and ep3.task == "take the key from the box."
    assert ep3.observations == ["You are in a room with a box, a drawer and a fridge.", "You open box.",
                                "You take key."]
    # completion = policy turn 1 (mask 1) | env turn (mask 0) | policy turn 2 (mask 1)
    t1 = chat.encode("<action>open box</action>") + [chat.eos_token_id]
    t2 = chat.encode("<action>take key</action>") + [chat.eos_token_id]
    admissible = ["look", "open box", "open drawer", "open fridge", "take key", "take apple", "take pen"]
    env = chat.turn_ids(toy_turn_message("toy", observation="You open box.", admissible_actions=admissible,
                                         step=2))
    assert ep3.tokens.completion_ids == t1 + env + t2
    assert ep3.tokens.completion_mask == [1] * len(t1) + [0] * len(env) + [1] * len(t2)
    assert ep3.tokens.prompt_ids == chat.prompt_ids(ep3.prompt_messages)
    roles = [m["role"] for m in ep3.messages]
    assert roles == ["user", "assistant", "user", "assistant"]
    assert ep3.messages[1]["content"] == "<action>open box</action>"


def test_group_index_counts_rollouts_of_the_same_task(chat):
    gen = ScriptedGenerator(chat, [["<action>open box</action>"] * 4])
    eps = _run(chat, gen, ["toy-0", "toy-1", "toy-0", "toy-0"], max_turns=1)
    assert [e.group_index for e in eps] == [0, 0, 1, 2]


def test_turn_cut_by_max_new_tokens_gets_a_masked_eos(chat):
    gen = ScriptedGenerator(chat, [["<action>open box</action> and more words here"]], eos=False)
    (ep,) = _run(chat, gen, ["toy-1"], max_new_tokens=5, max_turns=1)
    assert gen.calls == [(1, 5)]
    assert ep.tokens.completion_ids[-1] == chat.eos_token_id
    assert ep.tokens.completion_mask == [1] * 5 + [0]
    assert ep.truncated and ep.num_turns == 1 and not ep.won


def test_max_turns_and_token_budget_truncate(chat):
    gen = ScriptedGenerator(chat, [["<action>look</action>"]] * 3)
    (ep,) = _run(chat, gen, ["toy-0"], max_turns=2)
    assert ep.num_turns == 2 and ep.truncated and not ep.won

    prompt_len = len(chat.prompt_ids(_run(chat, ScriptedGenerator(chat, [["x"]]), ["toy-0"],
                                          max_turns=1)[0].prompt_messages))
    budget = prompt_len + 20  # room for one turn, not for the env turn and a second one
    gen = ScriptedGenerator(chat, [["<action>look</action>"]] * 3)
    (ep,) = _run(chat, gen, ["toy-0"], max_total_tokens=budget)
    assert ep.truncated and ep.num_turns == 1
    assert len(ep.tokens) <= budget
    assert gen.calls[0][1] == min(32, budget - prompt_len - 1)

    gen = ScriptedGenerator(chat, [["<action>look</action>"]] * 3)
    (ep,) = _run(chat, gen, ["toy-0"], max_completion_tokens=12)
    assert gen.calls == [(1, 11)] and len(ep.tokens.completion_ids) <= 12 and ep.truncated


def test_worker_error_ends_only_that_episode(chat):
    gen = ScriptedGenerator(chat, [["<action>open box</action>"]])
    ok, bad = _run(chat, gen, ["toy-0", "toy-1"], pool=ToyPool(fail_tasks=["toy-1"]))
    assert gen.calls == [(1, 32)]
    assert ok.won and bad.error == "worker crashed" and bad.num_turns == 0
    assert bad.tokens.completion_ids == []


def test_lifecycle_injects_the_global_into_the_student_prompt_only(chat):
    gen = ScriptedGenerator(chat, [["<action>open box</action>"]])
    (ep,) = _run(chat, gen, ["toy-0"], lifecycle=FakeLifecycle(), max_turns=1)
    assert "open the box first" in ep.student_messages[-1]["content"]
    assert "open the box first" not in ep.prompt_messages[-1]["content"]
    assert ep.tokens.prompt_ids == chat.prompt_ids(ep.student_messages)
    assert ep.global_version == 3


def test_to_trajectory_carries_what_the_lifecycle_reads(chat):
    gen = ScriptedGenerator(chat, [["<action>open box</action>", "<action>look</action>"]])
    eps = _run(chat, gen, ["toy-0", "toy-0"], max_turns=1)
    traj = to_trajectory(eps[0], step=4, traj_id="4-toy-0-0", advantage=0.5)
    assert (traj.task_id, traj.scope, traj.step, traj.success, traj.reward, traj.advantage) == \
        ("toy-0", "open", 4, True, 1.0, 0.5)
    assert traj.metadata["actions"] == ["open box"]
    assert traj.metadata["observations"] == ["You open box."]
    assert traj.metadata["initial_observation"] == eps[0].observations[0] and traj.metadata["env"] == "toy"
    assert traj.completion_ids == eps[0].tokens.completion_ids and traj.base_logps is None
    assert traj.responses == ["<action>open box</action>"]
    with pytest.raises(ValueError, match="base_logps"):
        to_trajectory(eps[1], step=4, traj_id="x", base_logps=[0.0])


def test_hf_generate_fn_left_pads_and_stops_at_eos(chat, tiny_model):
    contexts = [chat.prompt_ids([{"role": "user", "content": "Your task is to: open the box."}]),
                chat.prompt_ids([{"role": "user", "content": "look"}])]
    greedy = hf_generate_fn(tiny_model, chat, do_sample=False, return_logps=True)
    batched = greedy(contexts, 12)
    singles = [greedy([c], 12)[0] for c in contexts]
    for b, s in zip(batched, singles):
        assert b.token_ids == s.token_ids  # left padding does not change what is generated
        assert len(b.token_ids) <= 12
        assert chat.eos_token_id not in b.token_ids[:-1]
    # Greedy log-probs equal an independent plain-logits computation on [context | generated].
    for ctx, g in zip(contexts, singles):
        ids = torch.tensor([ctx + g.token_ids])
        with torch.no_grad():
            logits = tiny_model(ids).logits[0, len(ctx) - 1:-1].log_softmax(-1)
        ref = logits.gather(-1, torch.tensor(g.token_ids)[:, None]).squeeze(-1)
        torch.testing.assert_close(torch.tensor(g.logps), ref, atol=1e-4, rtol=1e-4)


def test_hf_generate_fn_sampling_is_seeded(chat, tiny_model):
    ctx = [chat.prompt_ids([{"role": "user", "content": "open the box"}])] * 3
    fn = hf_generate_fn(tiny_model, chat, temperature=1.0, batch_size=2)
    torch.manual_seed(1)
    a = fn(ctx, 8)
    torch.manual_seed(1)
    b = fn(ctx, 8)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert all(g.logps is None for g in a)


class AlfLikePool:
    """Two-step fake with ALFWorld-shaped info, to exercise the default envs.prompts / envs.projection path."""

    def __init__(self):
        self.steps = []

    def _info(self, won=False):
        return {"admissible_actions": ["look", "go to desk 1", "inventory"], "won": won, "score": float(won),
                "task_type": "pick", "task": "put a mug in desk."}

    def reset(self, task_ids):
        from skillduet_testing.toy_pool import ToyStepResult

        return [ToyStepResult(obs="You are in the middle of a room.", info=self._info()) for _ in task_ids]

    def step(self, ids, actions):
        from skillduet_testing.toy_pool import ToyStepResult

        self.steps.append(list(actions))
        won = len(self.steps) == 2
        return [ToyStepResult(obs="You arrive at desk 1.", reward=10.0 if won else 0.0, done=won, info=self._info(won))
                for _ in ids]


def test_default_prompts_and_projection_are_the_env_modules(chat):
    from skillduet_plugin.envs.prompts import initial_messages, turn_message

    answer = "<think>the mug may be on the desk</think><action>go to desk 1</action>"
    gen = ScriptedGenerator(chat, [[answer], ["<action>look</action>"]])
    pool = AlfLikePool()
    (ep,) = run_episodes(["g0"], env_name="alfworld", pool=pool, generate_fn=gen, chat=chat, max_turns=5,
                         max_new_tokens=64, max_total_tokens=4096, action_selection="generate")
    assert ep.prompt_messages == initial_messages("alfworld", task="put a mug in desk.",
                                                  observation="You are in the middle of a room.",
                                                  admissible_actions=["look", "go to desk 1", "inventory"])
    assert pool.steps == [["go to desk 1"], ["look"]]
    assert ep.valid == [True, False]  # the second answer has no <think> block
    assert ep.won and ep.reward == 10.0 and ep.scope == "pick"
    expected_turn = turn_message("alfworld", observation="You arrive at desk 1.",
                                 admissible_actions=["look", "go to desk 1", "inventory"], step=2)
    assert ep.messages[2] == {"role": "user", "content": expected_turn}


def test_scope_follows_the_lifecycle_scope_setting(chat, tmp_path, tiny_tokenizer):
    from skillduet_plugin.config import SkillDuetConfig
    from skillduet_plugin.skills.lifecycle import SkillLifecycle

    lifecycle = SkillLifecycle(SkillDuetConfig(scope="task"), tmp_path / "bank.sqlite", tokenizer=tiny_tokenizer)
    gen = ScriptedGenerator(chat, [["<action>open box</action>"] * 2])
    eps = _run(chat, gen, ["toy-0", "toy-4"], lifecycle=lifecycle, max_turns=1)
    assert [e.scope for e in eps] == ["toy-0", "toy-4"]
    assert all(e.global_version is None for e in eps)  # nothing consolidated yet
    assert eps[0].student_messages == eps[0].prompt_messages


def test_scope_without_a_lifecycle_config_is_the_declared_default():
    from types import SimpleNamespace

    from skillduet_plugin.config import SkillDuetConfig
    from skillduet_plugin.rollout.collector import _scope_setting

    declared = SkillDuetConfig().scope
    assert _scope_setting(None) == _scope_setting(FakeLifecycle()) == declared
    assert _scope_setting(SimpleNamespace(config=SkillDuetConfig(scope="single"))) == "single" != declared


class FailingResetPool(AlfLikePool):
    """The second task's reset fails as ``EnvPool`` reports it: an error and an info without the task text."""

    def reset(self, task_ids):
        from skillduet_testing.toy_pool import ToyStepResult

        results = super().reset(task_ids)
        results[1] = ToyStepResult(obs="", done=True, info={"won": False, "task_id": task_ids[1]},
                                   error="reset timed out")
        return results


def test_failed_reset_on_standard_prompts_ends_only_that_episode(chat):
    gen = ScriptedGenerator(chat, [["<action>go to desk 1</action>"], ["<action>look</action>"]])
    ok, bad = _run(chat, gen, ["g0", "g1"], pool=FailingResetPool(), env_name="alfworld")
    assert bad.error == "reset timed out" and bad.num_turns == 0 and not bad.won
    assert ok.error is None and ok.num_turns >= 1
