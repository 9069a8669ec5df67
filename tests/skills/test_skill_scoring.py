"""Strength/Utility/Contrast scoring: held-out sets, one batched logprob call, hand-computed shifts, tiny model."""

from __future__ import annotations

import pytest
import torch

from skillduet_plugin.config import SkillDuetConfig
from skillduet_plugin.core.logprobs import response_logprobs
from skillduet_plugin.core.conversation import ChatTokenizer
from skillduet_plugin.skills.bank import BANK_FILENAME
from skillduet_plugin.skills.lifecycle import SkillLifecycle
from skillduet_plugin.skills.scoring import heldout_set, score_skills
from skillduet_plugin.skills.types import Skill

from skills_fakes import make_traj


def _skill(text: str, sources=("a1",), scope: str = "clean", task_id: str = "tA") -> Skill:
    return Skill(text=text, scope=scope, kind="procedure", source_traj_ids=sources, step=1,
                 metadata={"task_id": task_id})


def test_heldout_policies_and_cap():
    trajs = [make_traj("a1", "tA", completion_len=6), make_traj("a2", "tA", completion_len=6),
             make_traj("b1", "tB", completion_len=6), make_traj("x1", "tX", scope="heat", completion_len=6),
             make_traj("v1", "tB", split="val", completion_len=6), make_traj("n1", "tB")]  # n1: no tokens
    skill = _skill("open the fridge")
    ids = lambda hs: sorted(t.traj_id for t in hs)  # noqa: E731
    assert ids(heldout_set(skill, trajs, "same_scope", 8)) == ["a2", "b1"]
    assert ids(heldout_set(skill, trajs, "same_scope_other_tasks", 8)) == ["b1"]
    assert ids(heldout_set(skill, trajs, "any", 8)) == ["a2", "b1", "x1"]
    capped = heldout_set(skill, trajs, "any", 2)
    assert len(capped) == 2 and capped == heldout_set(skill, list(reversed(trajs)), "any", 2)  # order-free


def test_shifts_match_hand_computation_with_one_batched_call():
    # every completion: 6 tokens, mask [0,1,1,0,1,1] (4 valid), base logps -1.0, -1.1, ..., -1.5
    trajs = [make_traj("a1", "tA", completion_len=6, success=True, advantage=2.0),
             make_traj("r1", "tB", completion_len=6, success=True, advantage=2.0),
             make_traj("r2", "tC", completion_len=6, success=False, advantage=-1.0)]
    s1, s2 = _skill("skill one", sources=("a1",)), _skill("skill two", sources=("r1", "r2"), task_id="tZ")
    # the skill-conditioned log-prob is base + bump on tokens 1 and 4, and +7 on token 3 (masked: env token)
    bumps = {("skill one", "r1"): 0.5, ("skill one", "r2"): -0.2, ("skill two", "a1"): 0.3}
    keys = sorted(bumps)
    calls = []

    def context_fn(traj, skill):
        return [100 + keys.index((skill.text, traj.traj_id))]

    def logprob_fn(contexts, responses):
        calls.append(len(contexts))
        out = []
        for ctx, resp in zip(contexts, responses):
            bump = bumps[keys[ctx[0] - 100]]
            base = torch.tensor([-1.0 - 0.1 * i for i in range(len(resp))])
            out.append(base + torch.tensor([0.0, bump, 0.0, 7.0, bump, 0.0]))
        return out

    scores = score_skills([s1, s2], trajs, logprob_fn, context_fn, policy="any", max_heldout=8)
    assert calls == [3]  # one call: s1 on r1, r2; s2 on a1 (r1, r2 produced s2)
    d1, d2, d3 = 2 * 0.5 / 4, 2 * -0.2 / 4, 2 * 0.3 / 4
    assert scores[s1.skill_id].shifts == pytest.approx({"r1": d1, "r2": d2})
    assert scores[s1.skill_id].strength == pytest.approx((abs(d1) + abs(d2)) / 2)
    assert scores[s1.skill_id].utility == pytest.approx((2.0 * d1 + -1.0 * d2) / 2)
    assert scores[s1.skill_id].contrast == pytest.approx(d1 - d2)
    assert scores[s2.skill_id].n_heldout == 1 and scores[s2.skill_id].strength == pytest.approx(d3)
    assert scores[s2.skill_id].contrast is None
    assert scores[s2.skill_id].note == "contrast_undefined:no_failure_heldout"


def test_missing_base_logps_join_the_same_call_with_the_student_context():
    t = make_traj("r1", "tB", completion_len=6)
    t.base_logps = None
    seen = []

    def logprob_fn(contexts, responses):
        seen.append([list(c) for c in contexts])
        return [torch.full((6,), -1.0 if c == [9] else -2.0) for c in contexts]

    scores = score_skills([_skill("x skill")], [t], logprob_fn, lambda tr, s: [9] if s is None else [5],
                          policy="any", max_heldout=4)
    assert seen == [[[5], [9]]]
    assert next(iter(scores.values())).strength == pytest.approx(1.0)


def test_no_heldout_gives_none_scores_with_a_reason():
    trajs = [make_traj("a1", "tA", completion_len=6)]
    scores = score_skills([_skill("x skill")], trajs, lambda c, r: [], lambda t, s: [1], policy="same_scope",
                          max_heldout=4)
    sc = next(iter(scores.values()))
    assert (sc.strength, sc.utility, sc.contrast, sc.n_heldout, sc.note) == (None, None, None, 0, "no_heldout")


def test_misaligned_base_logps_raise_naming_the_trajectory():
    t = make_traj("r1", "tB", completion_len=6)
    t.base_logps = t.base_logps[:-1]
    with pytest.raises(ValueError, match="trajectory r1: base_logps has 5 entries"):
        score_skills([_skill("x skill")], [t], lambda c, r: [torch.zeros(len(x)) for x in r], lambda t, s: [1],
                     policy="any", max_heldout=4)


def test_lifecycle_score_with_tiny_model_matches_independent_forward(tmp_path, tiny_tokenizer, tiny_model):
    lc = SkillLifecycle(SkillDuetConfig(heldout="any"), tmp_path / BANK_FILENAME, tokenizer=tiny_tokenizer,
                        similarity=None)
    chat = ChatTokenizer(tiny_tokenizer)
    trajs = [make_traj(tid, f"t{tid}", success=(k % 2 == 0)) for k, tid in enumerate(("a", "b", "c"))]
    for t in trajs:
        t.prompt_ids = chat.prompt_ids(lc.student_messages(t.prompt_messages, task=t.task, scope=t.scope))
        ids = chat.encode("<think>go</think><action>go to sinkbasin 1</action>") + [chat.eos_token_id]
        env = chat.turn_ids("You arrive at sinkbasin 1.")
        t.completion_ids = ids + env + ids
        t.completion_mask = [1] * len(ids) + [0] * len(env) + [1] * len(ids)
        with torch.no_grad():
            t.base_logps = response_logprobs(tiny_model, [t.prompt_ids], [t.completion_ids])[0].tolist()
    skill = Skill(text="Go to the sinkbasin and clean the knife first.", scope="clean", kind="procedure",
                  source_traj_ids=("a",), step=1)
    lc.bank.add_candidates([skill], 1)
    calls = []

    def logprob_fn(contexts, responses):
        calls.append(len(contexts))
        with torch.no_grad():
            return response_logprobs(tiny_model, contexts, responses)

    result = lc.score([skill], trajs, logprob_fn)
    assert calls == [2]
    expected = []
    for t in trajs[1:]:
        ctx = chat.prompt_ids(lc.teacher_messages(t.prompt_messages, task=t.task, scope=t.scope, local_skill=skill))
        with torch.no_grad():
            lp = response_logprobs(tiny_model, [ctx], [t.completion_ids])[0]
        m = torch.tensor(t.completion_mask, dtype=torch.float32)
        expected.append(float(((lp - torch.tensor(t.base_logps)) * m).sum() / m.sum()))
    assert all(abs(e) > 1e-6 for e in expected)  # the skill really moves the tiny model
    got = result[skill.skill_id]
    assert got["strength"] == pytest.approx(sum(abs(e) for e in expected) / 2, rel=1e-4, abs=1e-6)
    assert got["contrast"] == pytest.approx(expected[1] - expected[0], rel=1e-4, abs=1e-6)  # c wins, b fails
    cached = lc.bank.candidates()[0]
    assert cached.scores["strength"] == pytest.approx(got["strength"]) and cached.metadata["n_heldout"] == 2


def _run_of(uid_prefix: str, order_ids: bool) -> list:
    """One step's six trajectories of two tasks under verl-style keys ``{uid}_{session}_{index}`` whose uid part
    is drawn per run; with ``order_ids`` each also carries the id the verl adapter sets (the task with the rest)."""
    out = []
    for k, task in enumerate(("tB", "tC")):
        for session in range(3):
            t = make_traj(f"{uid_prefix}{k}-{task}_{session}_0", task_id=task, completion_len=4)
            if order_ids:
                t.order_id = f"{task}_{session}_0"
            out.append(t)
    return out


def _picked(trajectories, skill) -> list[str]:
    chosen = heldout_set(skill, trajectories, "same_scope", 2)
    return [t.order_id or t.traj_id.partition("_")[2] + t.task_id for t in chosen]


def test_capped_heldout_set_ignores_a_per_run_random_part_of_the_trajectory_id():
    """A resumed verl run draws other prompt uids: with order ids it scores the same two held-out rows of six; the
    negative control (the raw ids) picks other rows for one of these uid draws, as a CI run saw (Strength 0.0014
    uninterrupted vs 0.00098 resumed on the same skills)."""
    skill = _skill("- Search receptacles.", sources=("nothing",), task_id="tA")
    draws = ["dd5561", "dfcd21", "8d5dc4", "c8a5c1"]
    picked = {tuple(_picked(_run_of(d, True), skill)) for d in draws}
    assert len(picked) == 1 and len(next(iter(picked))) == 2, picked
    assert len({tuple(_picked(_run_of(d, False), skill)) for d in draws}) > 1


def test_a_selector_named_like_a_scored_candidates_field_is_refused():
    """A score is also read as ``SkillScore.<name>`` and stored beside ``n_heldout``/``note``/``scored_step`` in
    the bank record: a score under one of those names would be shadowed, so registering it is a one-line error."""
    import dataclasses

    from skillduet_plugin.config import ConfigError
    from skillduet_plugin.core.selectors import RESERVED_SCORE_NAMES, SELECTORS, register_selector
    from skillduet_plugin.skills.scoring import SkillScore

    own = {f.name for f in dataclasses.fields(SkillScore)} | {n for n in vars(SkillScore) if not n.startswith("_")}
    record = set(SkillScore("x", {}, 0, {}).as_record()) | {"scored_step"}
    assert own | record <= RESERVED_SCORE_NAMES
    before = SELECTORS.names()
    for name in sorted(own | record) + ["__class__", "__dict__"]:
        with pytest.raises(ConfigError, match=rf"^selector='{name}' is invalid: a scored candidate's own field or "
                                              r"record key has that name \(.*\); pick another$"):
            register_selector(name)(lambda shifts, advantages, successes: 0.0)
    assert SELECTORS.names() == before
