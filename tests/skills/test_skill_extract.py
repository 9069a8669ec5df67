"""Local extraction: pairing rule, assignment, one batched analyzer call, validation never a candidate."""

from __future__ import annotations

from skillduet_plugin.skills.extract import cap_jobs, choose_pair, extract_local, plan_jobs
from skillduet_plugin.skills.prompts import TEMPLATE_NAMES, load_template
from skillduet_plugin.skills.render import ELISION_MARKER, render_trajectory

from skills_fakes import FakeBackend, default_answer, make_traj


def test_pair_is_highest_reward_success_and_lowest_reward_failure_ties_by_id():
    group = [make_traj("b", success=True, reward=1.0), make_traj("a", success=True, reward=1.0),
             make_traj("c", success=True, reward=0.5), make_traj("f", reward=0.2), make_traj("e", reward=0.0),
             make_traj("d", reward=0.0)]
    success, failure = choose_pair(group)
    assert success.traj_id == "a"  # tie at reward 1.0 -> smaller id
    assert failure.traj_id == "d"  # tie at reward 0.0 -> smaller id
    assert choose_pair([make_traj("x", success=True), make_traj("y", success=True)]) is None
    assert choose_pair([make_traj("x"), make_traj("y")]) is None


def test_paired_group_gives_one_shared_skill_assigned_to_every_member():
    trajs = [make_traj("s1", success=True), make_traj("f1"), make_traj("f2")]
    backend = FakeBackend()
    result, stats = extract_local(trajs, 3, backend, max_chars=2000)
    assert len(backend.batches) == 1 and len(backend.batches[0]) == 1
    payload = backend.batches[0][0].payload
    assert payload["kind"] == "local_pair"
    assert (payload["success"]["traj_id"], payload["failure"]["traj_id"]) == ("s1", "f1")
    assert payload["success"]["actions"] == ["go to sink s1", "take knife s1"]
    assert payload["success"]["won"] is True and payload["env"] == "alfworld" and payload["scope"] == "clean"
    assert [s.kind for s in result.skills] == ["shared"]
    shared = result.skills[0]
    assert shared.source_traj_ids == ("s1", "f1") and shared.step == 3
    assert result.assignment == {"s1": shared.skill_id, "f1": shared.skill_id, "f2": shared.skill_id}
    assert stats.requests == 1 and stats.assigned == 3


def test_unpaired_groups_give_procedure_or_correction_per_trajectory_in_one_batch():
    trajs = [make_traj("a1", "tA", success=True), make_traj("a2", "tA", success=True),
             make_traj("b1", "tB"), make_traj("c1", "tC", success=True), make_traj("c2", "tC")]
    backend = FakeBackend()
    result, _ = extract_local(trajs, 1, backend, max_chars=2000)
    assert len(backend.batches) == 1  # every request of the step in one generate call
    kinds = [r.payload["kind"] for r in backend.batches[0]]
    assert kinds == ["local_procedure", "local_procedure", "local_correction", "local_pair"]
    by_traj = {tid: result.skill_for(tid) for tid in ("a1", "a2", "b1", "c1", "c2")}
    assert by_traj["a1"].kind == "procedure" and by_traj["a1"].source_traj_ids == ("a1",)
    assert by_traj["a2"].kind == "procedure" and by_traj["a1"].skill_id != by_traj["a2"].skill_id
    assert by_traj["b1"].kind == "correction"
    assert by_traj["c1"].skill_id == by_traj["c2"].skill_id and by_traj["c1"].kind == "shared"


def test_validation_trajectories_never_become_candidates():
    trajs = [make_traj("v1", "tV", success=True, split="val"), make_traj("v2", "tV", split="val"),
             make_traj("t1", "tT")]
    backend = FakeBackend()
    result, stats = extract_local(trajs, 1, backend, max_chars=2000)
    sent = [r.payload for r in backend.batches[0]]
    assert len(sent) == 1 and sent[0]["trajectory"]["traj_id"] == "t1"
    assert all("v" not in sid for s in result.skills for sid in s.source_traj_ids)
    assert set(result.assignment) == {"t1"}
    assert stats.skipped == {"validation_split": 2}


def test_failed_and_rejected_answers_leave_trajectories_without_assignment():
    answers = {"a": None, "b": "<skill><|im_end|></skill>", "c": "<skill>Open the fridge before cooling.</skill>"}
    backend = FakeBackend(lambda p: answers[p["trajectory"]["traj_id"]])
    trajs = [make_traj("a", "ta"), make_traj("b", "tb"), make_traj("c", "tc")]
    result, stats = extract_local(trajs, 1, backend, max_chars=2000)
    assert set(result.assignment) == {"c"}
    assert result.failures == 1 and stats.rejected == 1
    assert sorted(r for r, _ in result.rejected) == ["backend_failed", "empty"]
    assert result.skills[0].text == "Open the fridge before cooling."


def test_same_advice_twice_is_one_skill_with_both_sources():
    backend = FakeBackend(lambda p: "<skill>Always open the drawer first.</skill>")
    result, _ = extract_local([make_traj("a", "ta"), make_traj("b", "tb")], 1, backend, max_chars=2000)
    assert len(result.skills) == 1 and result.skills[0].source_traj_ids == ("a", "b")
    assert result.assignment["a"] == result.assignment["b"] == result.skills[0].skill_id


def test_trajectories_without_actions_are_not_analysed():
    jobs, skipped = plan_jobs([make_traj("a", actions=[])])
    assert jobs == [] and skipped == {"no_actions": 1}


def test_render_keeps_task_outcome_and_final_turns_and_elides_the_middle():
    actions = [f"action number {i}" for i in range(200)]
    t = make_traj("long", actions=actions, success=False)
    text = render_trajectory(t, budget_tokens=120)
    assert len(text.split()) <= 120
    assert "action number 199" in text and "Outcome: failure" in text
    assert "action number 0" in text  # the first turn is kept while it fits
    assert "middle turn(s) omitted" in text and "action number 100" not in text
    assert ELISION_MARKER.split("{")[0] in text
    t.metadata["initial_observation"] = "You are in the middle of a room."
    assert render_trajectory(t, budget_tokens=120).startswith("Initial observation: You are in the middle")
    short = render_trajectory(make_traj("s", actions=["look"]), budget_tokens=120)
    assert "omitted" not in short and "Action: look" in short


def test_prompt_templates_are_package_data_with_placeholders():
    for name in TEMPLATE_NAMES:
        text = load_template(name)
        assert "=== USER ===" in text
    assert "{{success}}" in load_template("local_pair") and "{{failure}}" in load_template("local_pair")
    trajs = [make_traj("s", success=True), make_traj("f")]
    jobs, _ = plan_jobs(trajs)
    user = jobs[0].request.messages[-1]["content"]
    assert "Task: clean the t1 knife" in user and "go to sink s" in user and "{{" not in user


def test_groups_extracted_apart_and_merged_equal_one_extraction_of_the_step():
    from skillduet_plugin.skills.extract import merge_extractions

    same = "<skill>Always open the drawer first.</skill>"
    # one advice text from groups extracted apart (tb first, tc at the end)
    backend = FakeBackend(lambda p: same if any(f"the {t} " in p["task"] for t in ("tb", "tc")) else default_answer(p))
    trajs = ([make_traj("a1", "ta"), make_traj("a2", "ta", success=True)]  # mixed group: one shared skill
             + [make_traj("b1", "tb"), make_traj("b2", "tb")] + [make_traj("c1", "tc")]
             + [make_traj("v1", "tv", split="valid")] + [make_traj("d1", "td", actions=[])])
    whole, whole_stats = extract_local(trajs, 1, backend, max_chars=2000)
    by_task = {}
    for t in trajs:
        by_task.setdefault(t.task_id, []).append(t)
    # the way a rollout delivers them: tb first, then ta, then the rest together at the end
    parts = [extract_local(by_task["tb"], 1, backend, max_chars=2000),
             extract_local(by_task["ta"], 1, backend, max_chars=2000),
             extract_local(by_task["tc"] + by_task["tv"] + by_task["td"], 1, backend, max_chars=2000)]
    merged, merged_stats = merge_extractions(parts)
    assert [s.skill_id for s in merged.skills] == [s.skill_id for s in whole.skills]
    assert [set(s.source_traj_ids) for s in merged.skills] == [set(s.source_traj_ids) for s in whole.skills]
    assert merged.assignment == whole.assignment and len(set(whole.assignment.values())) < len(whole.assignment)
    assert merged_stats == whole_stats
    # negative control: concatenating the parts without merging keeps the shared advice twice
    assert sum(len(p.skills) for p, _ in parts) == len(whole.skills) + 1


def test_render_counts_all_lines_in_one_tokenizer_call_with_the_same_result(tiny_tokenizer):
    from skillduet_plugin.skills.budget import count_tokens, count_tokens_many
    from skillduet_plugin.skills.render import render_trajectory

    class OneAtATime:  # the tokenizer, but a list is encoded text by text: what per-line counting computed
        def __init__(self):
            self.calls = 0

        def __call__(self, text, add_special_tokens=False):
            self.calls += 1
            if isinstance(text, list):
                return {"input_ids": [tiny_tokenizer(t, add_special_tokens=False)["input_ids"] for t in text]}
            return tiny_tokenizer(text, add_special_tokens=False)

    texts = ["Step 1. Action: go to fridge 1", "", "Observation: You see a mug 2 and an apple 1."]
    assert count_tokens_many(texts, tiny_tokenizer) == [count_tokens(t, tiny_tokenizer) for t in texts]
    assert count_tokens_many(texts) == [count_tokens(t) for t in texts]
    assert count_tokens_many([], tiny_tokenizer) == [] and count_tokens_many([""], tiny_tokenizer) == [0]
    from skillduet_plugin.skills.types import Trajectory

    traj = Trajectory(traj_id="0-t-0", task_id="t", scope="s", task="cool a mug.", success=False,
                      messages=[{"role": "user", "content": "You are in a room."}]
                      + [m for i in range(12) for m in (
                          {"role": "assistant", "content": f"<action>go to shelf {i}</action>"},
                          {"role": "user", "content": f"You arrive at shelf {i}. " * 5})])
    for budget in (3000, 120, 60, 25):
        counting = OneAtATime()
        text = render_trajectory(traj, budget, counting)
        assert text == render_trajectory(traj, budget, tiny_tokenizer)
        assert counting.calls == 1  # one call per trajectory, not one per line
    assert "omitted" in render_trajectory(traj, 60, tiny_tokenizer)  # the budgets above do cut turns


def test_every_request_asks_for_the_local_reply_budget():
    trajs = [make_traj("s1", success=True), make_traj("f1"), make_traj("a1", "tA", success=True)]
    backend = FakeBackend()
    extract_local(trajs, 1, backend, max_chars=2000, reply_tokens=96)
    assert [r.max_tokens for r in backend.batches[0]] == [96, 96]
    backend = FakeBackend()
    extract_local(trajs, 1, backend, max_chars=2000)
    assert [r.max_tokens for r in backend.batches[0]] == [None, None]  # no budget given: the backend's cap


def test_request_cap_takes_jobs_round_robin_over_groups_and_counts_the_rest():
    # group tA: 3 procedures, group tB: 1 shared, group tC: 2 corrections -> 6 jobs
    trajs = [make_traj(f"a{i}", "tA", success=True) for i in range(3)]
    trajs += [make_traj("b1", "tB", success=True), make_traj("b2", "tB")]
    trajs += [make_traj("c1", "tC"), make_traj("c2", "tC")]
    jobs, _ = plan_jobs(trajs)
    assert len(jobs) == 6
    kept, dropped = cap_jobs(jobs, 4)
    # every group's first job, then the second of the first group with one: plan order kept
    assert [j.sources for j in kept] == [("a0",), ("a1",), ("b1", "b2"), ("c1",)] and dropped == 2
    assert cap_jobs(jobs, 0) == (jobs, 0) and cap_jobs(jobs, 6) == (jobs, 0)
    backend = FakeBackend()
    result, stats = extract_local(trajs, 1, backend, max_chars=2000, max_requests=4)
    assert len(backend.batches[0]) == 4 and stats.requests == 4 and stats.capped == 2
    assert set(result.assignment) == {"a0", "a1", "b1", "b2", "c1"}  # a2 and c2 wait for another step
