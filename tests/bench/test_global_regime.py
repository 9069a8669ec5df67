"""The step-overhead benchmarks' global regime: the Global seeded into the bank before a run reaches the rollout
prompt, whole, at the token count the benchmark states."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import _global_regime  # noqa: E402

BUDGET = 256


def _first_prompt(lifecycle, chat, task_id):
    """The first rollout prompt of ``task_id`` as the collector builds it (one turn, the policy says ``look``)."""
    from skillduet_plugin.envs.pool import EnvPool
    from skillduet_plugin.rollout.collector import run_episodes
    from skillduet_plugin.rollout.engine import Generation

    answer = chat.tokenizer("<think>look around</think><action>look</action>", add_special_tokens=False)["input_ids"]

    def generate(contexts, max_new_tokens):
        return [Generation(token_ids=list(answer) + [chat.tokenizer.eos_token_id]) for _ in contexts]

    with EnvPool("alfworld", num_workers=0, env_kwargs={"max_steps": 50}) as pool:
        (ep,) = run_episodes([task_id], env_name="alfworld", pool=pool, generate_fn=generate, chat=chat,
                             lifecycle=lifecycle, max_turns=1, max_new_tokens=64, max_total_tokens=8192,
                             action_selection="generate")
    return ep


@pytest.fixture()
def rollout(tmp_path, tiny_tokenizer):
    from skillduet_plugin.config import SkillDuetConfig
    from skillduet_plugin.core.conversation import ChatTokenizer
    from skillduet_plugin.envs import make
    from skillduet_plugin.skills.lifecycle import SkillLifecycle

    with make("alfworld", split="train", max_steps=50) as env:
        task_id = env.tasks[0]
    chat = ChatTokenizer(tiny_tokenizer)
    lifecycles = []

    def play(name, seed_scopes=None):
        life = SkillLifecycle(SkillDuetConfig(skill_token_budget=BUDGET), tmp_path / f"{name}.sqlite",
                              tokenizer=tiny_tokenizer, analyzer=object(), synthesizer=object(), similarity=None)
        lifecycles.append(life)
        seeded = None
        if seed_scopes is not None:
            seeded = _global_regime.seed_globals(life.bank, seed_scopes, BUDGET, tiny_tokenizer)
            life.reload()
        return seeded, _first_prompt(life, chat, task_id)

    yield play
    for life in lifecycles:
        life.close()


def test_seeded_global_reaches_the_rollout_prompt_whole_at_the_stated_tokens(rollout, tiny_tokenizer):
    scopes = _global_regime.game_scopes("alfworld", env_kwargs={"max_steps": 50})
    assert scopes == ["clean", "cool", "heat", "look", "pick", "pick2"]  # every task type of the generated games
    seeded, ep = rollout("seeded", scopes)
    _, plain = rollout("empty")  # negative control: the same task on a bank without a Global
    # at its budget: within one skill line (~40 tokens here) of it, never over it
    assert BUDGET - 48 < seeded.tokens <= BUDGET
    assert seeded.tokens == len(tiny_tokenizer(seeded.text, add_special_tokens=False)["input_ids"])
    prompt = tiny_tokenizer.decode(ep.tokens.prompt_ids)
    assert f"## Skills\n{seeded.text}" in prompt  # whole: not cut by the injector's budget
    assert "## Skills" not in tiny_tokenizer.decode(plain.tokens.prompt_ids)
    assert ep.global_version == 1 and plain.global_version is None
    # the prompt grows by the Global's tokens plus the header and the blank lines around it (10 tokens here)
    growth = len(ep.tokens.prompt_ids) - len(plain.tokens.prompt_ids)
    assert seeded.tokens < growth <= seeded.tokens + 16


def test_a_global_seeded_for_other_scopes_does_not_reach_the_prompt(rollout):
    seeded, ep = rollout("elsewhere", ["no_such_scope"])
    assert seeded.tokens > 0 and ep.global_version is None and "## Skills" not in ep.prompt_messages[-1]["content"]


def test_seed_refuses_no_scopes_and_a_tiny_budget(tmp_path, tiny_tokenizer):
    from skillduet_plugin.skills.bank import SkillBank

    bank = SkillBank(tmp_path / "b.sqlite")
    try:
        with pytest.raises(ValueError, match="scopes is empty"):
            _global_regime.seed_globals(bank, [], BUDGET, tiny_tokenizer)
        with pytest.raises(ValueError, match="budget=8"):
            _global_regime.seed_globals(bank, ["pick"], 8, tiny_tokenizer)
    finally:
        bank.close()
