"""The SkillLifecycle facade end to end over a few fake steps with a fake analyzer/synthesizer."""

from __future__ import annotations

import math
import threading
import time

import pytest
import torch

from skillduet_plugin.config import SkillDuetConfig
from skillduet_plugin.core.conversation import ChatTokenizer
from skillduet_plugin.skills.bank import BANK_FILENAME
from skillduet_plugin.skills.lifecycle import SkillLifecycle, resolve_scope

from skills_fakes import FakeBackend, make_traj

SCOPES = ("clean", "heat")


def _length_logprob_fn(contexts, responses):
    """log p = -1 + 0.001 * len(context) per token: a skill's shift is 0.001 * its inserted token count."""
    return [torch.full((len(r),), -1.0 + 0.001 * len(c)) for c, r in zip(contexts, responses)]


def _step_trajectories(step: int, chat: ChatTokenizer, lc: SkillLifecycle) -> list:
    trajs = []
    for scope in SCOPES:
        for task in range(2):
            for k in range(3):
                t = make_traj(f"{step}-{scope}{task}-{k}", f"{scope}-{task}", scope=scope, step=step,
                              success=(k == 0 and task == 0), actions=["look", f"act-{step}-{scope}-{task}-{k}"],
                              advantage=1.0 if k == 0 else -0.5)
                t.prompt_ids = chat.prompt_ids(lc.student_messages(t.prompt_messages, task=t.task, scope=scope))
                t.completion_ids = chat.encode("<action>look</action>") + [chat.eos_token_id]
                t.completion_mask = [1] * len(t.completion_ids)
                t.base_logps = [-1.0 + 0.001 * len(t.prompt_ids)] * len(t.completion_ids)
                trajs.append(t)
    trajs.append(make_traj(f"{step}-val", "clean-9", scope="clean", step=step, split="val"))
    return trajs


def _run(lc: SkillLifecycle, chat: ChatTokenizer, steps) -> list:
    out = []
    for step in steps:
        trajs = _step_trajectories(step, chat, lc)
        result = lc.extract(trajs, step)
        lc.score(result.skills, trajs, _length_logprob_fn, assignment=result.assignment)
        out.append((result, lc.end_step(step)))
    return out


def test_facade_over_fake_steps(tmp_path, tiny_tokenizer):
    cfg = SkillDuetConfig(consolidation_interval=2, skill_token_budget=400)
    analyzer, synthesizer = FakeBackend(), FakeBackend()
    lc = SkillLifecycle(cfg, tmp_path / BANK_FILENAME, tokenizer=tiny_tokenizer, analyzer=analyzer,
                        synthesizer=synthesizer, similarity=None)
    chat = ChatTokenizer(tiny_tokenizer)
    (r1, rep1), (r2, rep2) = _run(lc, chat, [1, 2])
    # step 1: per scope one paired group (shared skill for 3 trajs) + one all-failure group (3 corrections)
    assert sorted(s.kind for s in r1.skills) == ["correction"] * 6 + ["shared"] * 2
    assert len(r1.assignment) == 12 and "1-val" not in r1.assignment
    assert len(analyzer.batches) == 2 and len(analyzer.batches[0]) == 8
    assert rep1 is None
    assert [r.scope for r in rep2] == ["clean", "heat"] and all(r.version == 1 for r in rep2)
    for r in rep2:  # 2 steps x 4 candidates; near-identical corrections deduplicated; top 50% of the rest
        dups = [x for x in r.rejected if x["reason"] in ("duplicate", "near_duplicate")]
        below = [x for x in r.rejected if x["reason"] == "below_top_k"]
        assert r.n_candidates == 8 and dups and len(r.kept) == math.ceil((8 - len(dups)) / 2)
        assert len(r.kept) + len(dups) + len(below) == 8
    # strength = 0.001 * inserted tokens: the kept ones are the longest skills of their scope
    cands = {s.skill_id: s for s in lc.bank.candidates(scope="clean")}
    kept_strength = sorted(cands[k].scores["strength"] for k in rep2[0].kept)
    rejected_strength = [cands[r["skill_id"]].scores["strength"] for r in rep2[0].rejected]
    assert min(kept_strength) >= max(rejected_strength) > 0
    g = lc.global_for("clean")
    assert g.version == 1 and g.items and all("heat" not in i for i in g.items)
    prompt = make_traj("x", "clean-0").prompt_messages
    student = lc.student_messages(prompt, task=make_traj("x", "clean-0").task, scope="clean")
    assert "## Skills\n- " in student[1]["content"] and g.items[0] in student[1]["content"]
    m = lc.metrics()
    assert m["skills/global_items"] == sum(len(lc.global_for(s).items) for s in SCOPES)
    assert m["skills/local_extracted"] == 16 and m["skills/analyzer_failures"] == 0
    assert m["skills/skipped_validation"] == 2 and m["skills/strength_mean"] > 0
    assert m["skills/global_tokens"] > 0 and m["skills/consolidations"] == 1


def test_resume_from_snapshot_repeats_the_schedule_bit_for_bit(tmp_path, tiny_tokenizer):
    cfg = SkillDuetConfig(consolidation_interval=2, selector="random", skill_token_budget=400)
    chat = ChatTokenizer(tiny_tokenizer)

    def lifecycle(path):
        return SkillLifecycle(cfg, path, tokenizer=tiny_tokenizer, analyzer=FakeBackend(),
                              synthesizer=FakeBackend(), similarity=None)

    full = lifecycle(tmp_path / "full" / BANK_FILENAME)
    _run(full, chat, [1, 2])
    full.snapshot(tmp_path / "ckpt-2")
    _run(full, chat, [3, 4])
    resumed = lifecycle(tmp_path / "resumed" / BANK_FILENAME)
    _run(resumed, chat, [1])  # state that the restore must discard
    resumed.restore(tmp_path / "ckpt-2")
    _run(resumed, chat, [3, 4])
    for scope in SCOPES:
        a, b = full.bank.history(scope), resumed.bank.history(scope)
        assert [(v.version, v.step, v.items, v.report["kept"]) for v in a] == \
               [(v.version, v.step, v.items, v.report["kept"]) for v in b]
    assert [s.skill_id for s in full.bank.candidates()] == [s.skill_id for s in resumed.bank.candidates()]


def test_reader_never_writes_and_reload_sees_new_globals(tmp_path, tiny_tokenizer):
    path = tmp_path / BANK_FILENAME
    cfg = SkillDuetConfig(consolidation_interval=1)
    writer = SkillLifecycle(cfg, path, tokenizer=tiny_tokenizer, analyzer=FakeBackend(),
                            synthesizer=FakeBackend(), similarity=None)
    reader = SkillLifecycle(cfg, path, tokenizer=tiny_tokenizer, analyzer=FakeBackend(),
                            synthesizer=FakeBackend(), write=False, similarity=None)
    assert reader.global_for("clean").version is None
    chat = ChatTokenizer(tiny_tokenizer)
    _run(writer, chat, [1])
    before = path.read_bytes(), sorted(p.name for p in tmp_path.iterdir())
    trajs = _step_trajectories(2, chat, reader)
    result = reader.extract(trajs, 2)
    assert result.skills and reader.score(result.skills, trajs, _length_logprob_fn)
    assert reader.end_step(2) is None
    assert (path.read_bytes(), sorted(p.name for p in tmp_path.iterdir())) == before
    assert reader.bank.candidates(since_step=1) == []
    assert reader.global_for("clean").version == 1  # end_step of a consolidation step reloaded it
    _run(writer, chat, [3])
    assert reader.global_for("clean").version == 1  # cached until reload
    reader.reload()
    assert reader.global_for("clean").version == 2


def test_analyzer_outage_never_raises_and_is_counted(tmp_path, tiny_tokenizer):
    cfg = SkillDuetConfig(consolidation_interval=1)
    lc = SkillLifecycle(cfg, tmp_path / BANK_FILENAME, tokenizer=tiny_tokenizer,
                        analyzer=FakeBackend(lambda p: None), synthesizer=FakeBackend(lambda p: None),
                        similarity=None)
    chat = ChatTokenizer(tiny_tokenizer)
    [(result, reports)] = _run(lc, chat, [1])
    assert result.skills == [] and result.assignment == {} and result.failures == 8
    assert reports == []  # no candidates: nothing to consolidate, no empty versions
    assert lc.metrics()["skills/analyzer_failures"] == 8


def test_parse_failures_fallbacks_and_the_request_cap_are_reported(tmp_path, tiny_tokenizer):
    # half the analyzer's replies are unusable, the synthesizer never answers, at most 4 requests a step
    def analyzer(p):
        return "ok" if p["kind"] == "local_correction" else f"<skill>Check every {p['scope']} receptacle twice.</skill>"

    cfg = SkillDuetConfig(consolidation_interval=1, analyzer_max_requests=4)
    lc = SkillLifecycle(cfg, tmp_path / BANK_FILENAME, tokenizer=tiny_tokenizer, analyzer=FakeBackend(analyzer),
                        synthesizer=FakeBackend(lambda p: None), similarity=None)
    chat = ChatTokenizer(tiny_tokenizer)
    [(result, reports)] = _run(lc, chat, [1])
    m = lc.metrics()
    # 8 jobs planned (2 shared, 6 corrections): the 4 kept are each group's first
    assert m["skills/step_analyzer_requests"] == 4 and m["skills/step_analyzer_capped"] == 4
    assert m["skills/analyzer_requests"] == 4 and m["skills/rejected"] == 2  # "ok" is too short to be a skill
    assert m["skills/analyzer_parse_failure_rate"] == pytest.approx(0.5)
    assert reports and all(r.fallback for r in reports) and m["skills/global_fallbacks"] == len(reports)
    # negative control: with every reply usable and answered nothing is counted as a failure or fallback
    lc2 = SkillLifecycle(SkillDuetConfig(consolidation_interval=1), tmp_path / "b2.sqlite", tokenizer=tiny_tokenizer,
                         analyzer=FakeBackend(), synthesizer=FakeBackend(), similarity=None)
    _run(lc2, chat, [1])
    m2 = lc2.metrics()
    assert m2["skills/analyzer_parse_failure_rate"] == 0 and m2["skills/global_fallbacks"] == 0
    assert m2["skills/step_analyzer_capped"] == 0 and m2["skills/step_analyzer_requests"] == 8


def test_resolve_scope():
    assert resolve_scope("task_type", task_type="clean", task_id="g1") == "clean"
    assert resolve_scope("task", task_type="clean", task_id="g1") == "g1"
    assert resolve_scope("single", task_type="clean", task_id="g1") == "all"


def test_with_the_offline_backend_and_a_tight_budget(tmp_path, tiny_tokenizer):
    """The real deterministic offline analyzer/synthesizer (built from the config) through the whole facade."""
    cfg = SkillDuetConfig(consolidation_interval=2, skill_token_budget=48)
    lc = SkillLifecycle(cfg, tmp_path / BANK_FILENAME, tokenizer=tiny_tokenizer, similarity=None, env="alfworld")
    chat = ChatTokenizer(tiny_tokenizer)
    results = _run(lc, chat, [1, 2])
    assert all(r.skills for r, _ in results)
    reports = results[1][1]
    assert reports and all(r.version == 1 for r in reports)
    for r in reports:
        g = lc.global_for(r.scope)
        assert g.items and r.tokens <= 48
        section = lc.student_messages(make_traj("x").prompt_messages, task=make_traj("x").task, scope=r.scope)
        assert "## Skills" in section[1]["content"]
    m = lc.metrics()
    assert m["skills/analyzer_failures"] == 0 and m["skills/global_tokens"] <= 48 * len(reports)


def test_plain_grpo_and_local_only_never_call_backends(tmp_path):
    grpo = SkillLifecycle(SkillDuetConfig(opd_coef=0.0, use_global=False, extract_local=False),
                          tmp_path / "a.sqlite", analyzer=FakeBackend(lambda p: 1 / 0), similarity=None)
    assert grpo.extract([make_traj("a")], 1).skills == []
    local_only = SkillLifecycle(SkillDuetConfig(use_global=False, consolidation_interval=1), tmp_path / "b.sqlite",
                                analyzer=FakeBackend(), synthesizer=FakeBackend(lambda p: 1 / 0), similarity=None)
    assert local_only.extract([make_traj("a")], 1).skills
    assert local_only.end_step(1) is None and local_only.bank.history() == []


def test_skills_gathered_from_other_ranks_are_stored_by_the_writer(tmp_path):
    path = tmp_path / BANK_FILENAME
    writer = SkillLifecycle(SkillDuetConfig(), path, analyzer=FakeBackend(), similarity=None)
    reader = SkillLifecycle(SkillDuetConfig(), path, analyzer=FakeBackend(), write=False, similarity=None)
    skills = reader.extract([make_traj("r1-a", "tA"), make_traj("r1-b", "tB")], 4)
    assert len(skills.skills) == 2
    with pytest.raises(PermissionError, match="write=False"):
        reader.add_candidates(skills.skills, 4)
    sid = skills.skills[0].skill_id
    assert writer.add_candidates(skills.skills, 4, scores={sid: {"strength": 0.25, "n_heldout": 3}}) == 2
    stored = {s.skill_id: s for s in writer.bank.candidates(until_step=4)}
    assert stored[sid].scores["strength"] == 0.25 and stored[sid].metadata["n_heldout"] == 3


def test_end_step_is_idempotent_for_a_replayed_step(tmp_path, tiny_tokenizer):
    lc = SkillLifecycle(SkillDuetConfig(consolidation_interval=1), tmp_path / BANK_FILENAME, tokenizer=tiny_tokenizer,
                        analyzer=FakeBackend(), synthesizer=FakeBackend(), similarity=None)
    [(_, first)] = _run(lc, ChatTokenizer(tiny_tokenizer), [1])
    again = lc.end_step(1)
    fields = [[(r.scope, r.version, r.items, r.kept) for r in results] for results in (again, first)]
    assert fields[0] == fields[1]
    assert [v.version for v in lc.bank.history("clean")] == [1]


@pytest.mark.parametrize("heldout", ["teacher", "same_scope"])
def test_score_without_recording_returns_the_same_scores_and_writes_nothing(tmp_path, tiny_tokenizer, heldout):
    """``record=False`` (the verl trainer's rollout-vs-actor comparison) computes the scores ``score`` records,
    and leaves the bank's cached scores and the step metrics alone."""
    cfg = SkillDuetConfig(consolidation_interval=5, heldout=heldout, skill_token_budget=400)
    lc = SkillLifecycle(cfg, tmp_path / BANK_FILENAME, tokenizer=tiny_tokenizer, analyzer=FakeBackend(),
                        synthesizer=FakeBackend(), similarity=None)
    chat = ChatTokenizer(tiny_tokenizer)
    trajs = _step_trajectories(1, chat, lc)
    result = lc.extract(trajs, 1)
    dry = lc.score(result.skills, trajs, _length_logprob_fn, assignment=result.assignment, record=False)
    unscored = [s.scores["strength"] for s in lc.bank.candidates()]
    assert unscored and all(v is None for v in unscored) and "skills/strength_mean" not in lc.metrics()
    recorded = lc.score(result.skills, trajs, _length_logprob_fn, assignment=result.assignment)
    assert dry == recorded and any(v["strength"] for v in dry.values())
    assert all(s.scores["strength"] is not None for s in lc.bank.candidates() if recorded[s.skill_id]["strength"])
    assert lc.metrics()["skills/strength_mean"] > 0


class _RemoteSynthesizer(FakeBackend):
    """A synthesizer that waits like a server: counts how many calls are in flight at once."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.inflight = self.max_inflight = 0
        self.lock = threading.Lock()

    def generate(self, requests):
        with self.lock:
            self.inflight += 1
            self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            time.sleep(0.3)
            return super().generate(requests)
        finally:
            with self.lock:
                self.inflight -= 1


def test_scopes_consolidate_concurrently_on_a_remote_synthesizer_with_the_same_globals(tmp_path, tiny_tokenizer):
    results = {}
    for kind in ("openai", "offline"):  # offline: one scope after another (the reference)
        cfg = SkillDuetConfig(consolidation_interval=2, skill_token_budget=400)
        synthesizer = _RemoteSynthesizer(kind)
        lc = SkillLifecycle(cfg, tmp_path / kind / BANK_FILENAME, tokenizer=tiny_tokenizer, analyzer=FakeBackend(),
                            synthesizer=synthesizer, similarity=None)
        reports = _run(lc, ChatTokenizer(tiny_tokenizer), [1, 2])[1][1]
        results[kind] = ([r.to_dict() for r in reports], synthesizer.max_inflight)
        lc.close()
    assert results["openai"][0] == results["offline"][0]  # same reports, same order
    assert [r["scope"] for r in results["openai"][0]] == ["clean", "heat"]
    assert results["openai"][1] == 2 and results["offline"][1] == 1  # two scopes in flight vs one at a time


def test_teacher_prompts_of_a_group_cut_each_section_once(tmp_path, tiny_tokenizer, monkeypatch):
    import skillduet_plugin.skills.lifecycle as lifecycle_module
    from skillduet_plugin.skills.inject import skill_section
    from skillduet_plugin.skills.types import Skill

    calls = []

    def counting(*args, **kwargs):
        calls.append(args[:2])
        return skill_section(*args, **kwargs)

    monkeypatch.setattr(lifecycle_module, "skill_section", counting)
    cfg = SkillDuetConfig(local_skill_token_budget=12)
    lc = SkillLifecycle(cfg, tmp_path / BANK_FILENAME, tokenizer=tiny_tokenizer, analyzer=FakeBackend(),
                        synthesizer=FakeBackend(), similarity=None)
    skill = Skill(text="- Open the fridge before you look inside.\n- Then take the apple and cool it quickly.",
                  scope="cool", kind="shared")
    prompt = [{"role": "user", "content": "Your task is to: cool an apple."}]
    first = lc.teacher_messages(prompt, task="cool an apple.", scope="cool", local_skill=skill)
    again = [lc.teacher_messages(prompt, task="cool an apple.", scope="cool", local_skill=skill) for _ in range(7)]
    assert all(m == first for m in again) and len(calls) == 2  # the Global (empty here) and the Local, once each
    cut = skill_section("### Local", skill.text, 12, tiny_tokenizer)  # negative control: the budget does cut
    assert cut != skill_section("### Local", skill.text, 1000, tiny_tokenizer)
    lc.close()
