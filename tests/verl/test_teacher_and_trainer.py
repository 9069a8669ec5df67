"""Teacher batches (same response tokens, the skill only in the teacher prompt, the task never cut) and the
``skillduet_sync`` trainer's step hooks, checkpoint and Global publication with fake worker groups."""

from __future__ import annotations

import json
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("verl")

from fakes import (HINDSIGHT_HEADER, FakeActorGroup, FakeBatch, FakeLifecycle, MemoryTQ,  # noqa: E402
                   position_logprobs)

from skillduet_plugin.integrations.verl.batch import build_trajectories, tensor_rows  # noqa: E402
from skillduet_plugin.integrations.verl.groups import GroupPrefetch  # noqa: E402
from skillduet_plugin.integrations.verl.server_logprobs import BackgroundLoop  # noqa: E402
from skillduet_plugin.integrations.verl.loss import OPD_MASK_KEY, TEACHER_LOGPROBS_KEY  # noqa: E402
from skillduet_plugin.integrations.verl.teacher import logprob_batch, split_response_logprobs  # noqa: E402
from skillduet_plugin.skills.teacher_plan import plan_teacher  # noqa: E402
from skillduet_plugin.core.conversation import ChatTokenizer  # noqa: E402
from skillduet_plugin.envs.toy import toy_initial_messages  # noqa: E402

TASKS = [("toy-3", "fetch", "take the key from the box."), ("toy-3", "fetch", "take the key from the box."),
         ("toy-0", "open", "open the box.")]


def _rows(chat):
    """Three rollouts (records as the agent loop writes them) plus one verl padding row."""
    records, prompts, responses, masks, old = [], [], [], [], []
    for i, (task_id, scope, task) in enumerate(TASKS):
        plain = toy_initial_messages("toy", task=task, observation="a room", admissible_actions=["look"])
        prompt = chat.prompt_ids(plain)
        response = chat.encode("<action>look</action>") + [chat.eos_token_id] + chat.turn_ids("obs") + \
            chat.encode("<action>open box</action>") + [chat.eos_token_id]
        mask = [1] * 6 + [0] * (len(response) - 12) + [1] * 6
        records.append({"skillduet": {"task_id": task_id, "scope": scope, "task": task, "prompt_messages": plain,
                                      "messages": plain, "won": i == 0, "reward": float(i == 0),
                                      "actions": ["look", "open box"], "observations": ["a room", "obs", "x"],
                                      "global_version": 2}})
        prompts.append(torch.tensor(prompt))
        responses.append(torch.tensor(response))
        masks.append(torch.tensor(mask[: len(response)] + [1] * max(0, len(response) - len(mask))))
        old.append(-0.5 * torch.ones(len(response)))
    records.append(dict(records[0]))  # padding row copies the first sample's metadata
    prompts.append(prompts[0]), responses.append(responses[0]), masks.append(torch.zeros_like(masks[0]))
    old.append(old[0])
    return records, prompts, responses, masks, old


def test_teacher_plan_same_response_skill_only_in_teacher_and_task_intact(tiny_tokenizer):
    chat = ChatTokenizer(tiny_tokenizer)
    records, prompts, responses, masks, old = _rows(chat)
    trajs = build_trajectories(["k0", "k1", "k2", "pad"], [r["skillduet"] for r in records], prompts, responses,
                               masks, old, step=4, skip=[False, False, False, True])
    assert [row for row, _ in trajs] == [0, 1, 2]  # the padding row never becomes a trajectory
    long_skill = " ".join(["- Correction: open the box before taking the key."] * 40)  # a long Local skill
    lifecycle = FakeLifecycle(skill_rows={0, 2}, skill_text=long_skill)
    extraction = lifecycle.extract([t for _, t in trajs], 4)
    plan = plan_teacher(prompts, responses, trajs, extraction, lifecycle, chat)
    assert plan.has_skill == [True, False, True, False]
    for i in range(4):
        assert plan.responses[i] == responses[i].tolist()  # the same response tokens, always
    for i in (1, 3):
        assert plan.contexts[i] == prompts[i].tolist()  # no skill: the student prompt, masked out later
    for i in (0, 2):
        teacher_text = tiny_tokenizer.decode(plan.contexts[i])
        student_text = tiny_tokenizer.decode(prompts[i].tolist())
        assert HINDSIGHT_HEADER in teacher_text and HINDSIGHT_HEADER not in student_text
        assert f"Your task is to: {TASKS[i][2]}" in teacher_text  # the task is never truncated
        assert teacher_text.count("open the box before taking the key") == 40  # nor is the skill, here
        assert plan.contexts[i][-3:] == prompts[i].tolist()[-3:]  # both end in the assistant header


def test_logprob_batch_layout_and_response_slicing():
    contexts, responses = [[1, 2, 3], [4, 5]], [[6, 7], [8, 9, 10]]
    td, real = logprob_batch(contexts, responses, temperature=0.7, pad_to_multiple=4)
    assert real == 2 and td.batch_size[0] == 4  # padded to the data-parallel multiple by repeating
    assert td["input_ids"].unbind()[1].tolist() == [4, 5, 8, 9, 10]
    assert td["position_ids"].unbind()[1].tolist() == [0, 1, 2, 3, 4]
    assert td["loss_mask"].unbind()[0].tolist() == [1, 1]
    full = torch.nested.as_nested_tensor([position_logprobs(5), position_logprobs(5)], layout=torch.jagged)
    out = split_response_logprobs(full, contexts, responses)
    # response token k sits at position len(context) + k - 1, i.e. value -0.001 * (len(context) + k)
    assert torch.allclose(out[0], torch.tensor([-0.003, -0.004]))
    assert torch.allclose(out[1], torch.tensor([-0.002, -0.003, -0.004]))


def _trainer(monkeypatch, tiny_tokenizer, tmp_path, lifecycle):
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    from skillduet_plugin.integrations.verl.settings import parse_settings
    from skillduet_plugin.integrations.verl.trainer import SkillDuetTrainer
    from skillduet_plugin.main_ppo import compose

    for name in ("_compute_old_log_prob", "_compute_advantage"):
        monkeypatch.setattr(PPOTrainer, name, lambda self, batch, metrics: batch)
    monkeypatch.setattr(PPOTrainer, "_save_checkpoint", lambda self: None)
    monkeypatch.setattr(PPOTrainerSync, "on_step_end", lambda self: None)
    cfg = compose(["trainer.plugins=[skillduet]", f"trainer.default_local_dir={tmp_path}",
                   "skillduet.opd_coef=0.5"])
    trainer = SkillDuetTrainer.__new__(SkillDuetTrainer)
    trainer.config, trainer.skillduet = cfg, parse_settings(cfg.skillduet)
    trainer.tokenizer, trainer.chat, trainer.lifecycle = tiny_tokenizer, ChatTokenizer(tiny_tokenizer), lifecycle
    trainer.actor_rollout_wg, trainer.global_steps = FakeActorGroup(dp_size=2), 10
    trainer._extraction, trainer._trajectories, trainer._scopes = None, [], set()
    trainer._checkpoint_folder, trainer.global_server = None, object()
    trainer._groups, trainer._prefill_loop, trainer._group_work = GroupPrefetch(), BackgroundLoop(), []
    trainer.published = []
    trainer._send_globals = lambda globals_by_scope: trainer.published.append(globals_by_scope)
    return trainer


def _step_batch(trainer, chat, keys=("k0", "k1", "k2", "pad")):
    """The rows of ``_rows`` (plus a padding row) in an in-memory TransferQueue wired into ``trainer``."""
    records, prompts, responses, masks, old = _rows(chat)
    tq = MemoryTQ({"prompts": prompts, "responses": responses, "response_mask": masks, "old_log_probs": old,
                   "extra_fields": records,
                   "advantages": [torch.full((len(r),), float(i)) for i, r in enumerate(responses)]})
    trainer._tq_get, trainer._tq_put = tq.get, tq.put

    def by_keys(wanted, fields):  # TransferQueue rows by key, as verl's kv_batch_get during the rollout
        rows = [list(keys).index(k) for k in wanted]
        return MemoryTQ({f: [tq.fields[f][i] for i in rows] for f in fields}).get(FakeBatch(keys=list(wanted)), fields)

    trainer._tq_get_keys = by_keys
    return tq, FakeBatch(keys=list(keys), tags=[{}, {}, {}, {"is_padding": True}])


def test_trainer_step_puts_teacher_logprobs_scores_and_consolidates(monkeypatch, tiny_tokenizer, tmp_path):
    chat = ChatTokenizer(tiny_tokenizer)
    _, prompts, responses, masks, _ = _rows(chat)
    lifecycle = FakeLifecycle(skill_rows={0, 2})
    trainer = _trainer(monkeypatch, tiny_tokenizer, tmp_path, lifecycle)
    tq, batch = _step_batch(trainer, chat)
    metrics: dict = {}
    trainer._compute_old_log_prob(batch, metrics)

    assert lifecycle.calls[0] == ("extract", ["k0", "k1", "k2"], 10)
    teacher = tensor_rows(tq.fields[TEACHER_LOGPROBS_KEY])
    opd_mask = tensor_rows(tq.fields[OPD_MASK_KEY])
    request = trainer.actor_rollout_wg.requests[0]
    assert request.batch_size[0] == 2  # only rows with a Local skill, already a multiple of dp=2
    contexts = [x.tolist() for x in request["prompts"].unbind()]
    for row, ctx in zip((0, 2), contexts):
        assert request["responses"].unbind()[(0, 2).index(row)].tolist() == responses[row].tolist()
        n = len(responses[row])
        expected = -0.001 * torch.arange(len(ctx), len(ctx) + n, dtype=torch.float32)
        assert torch.allclose(teacher[row], expected)  # the teacher pass on the skill-augmented context
        # OPD token weights: N_response / N_supervised of the whole batch, so the engine loss is Eq. 1 over it
        scale = sum(float(m.sum()) for m in masks) / float(masks[0].sum() + masks[2].sum())
        assert torch.allclose(opd_mask[row], masks[row].float() * scale)
    for row in (1, 3):
        assert torch.count_nonzero(opd_mask[row]) == 0 and torch.count_nonzero(teacher[row]) == 0
    assert metrics["skillduet/local_skills"] == 2 and metrics["skillduet/opd_trajectory_ratio"] == 2 / 3

    # the teacher prompt pins the Global version the rollout saw
    assert [c for c in lifecycle.calls if c[0] == "teacher_messages"] == [("teacher_messages", 2)] * 2
    trainer._compute_advantage(batch, metrics)
    calls = [c for c in lifecycle.calls if c[0] != "teacher_messages"]
    name, skill_ids, advantages, values = calls[1]
    assert name == "score" and len(skill_ids) == 2
    assert advantages == pytest.approx([0.0, 1.0, 2.0])  # trajectory-mean advantages for the Utility score
    assert [len(v) for v in values] == [len(r) for r in responses[:3]]
    # heldout="teacher": the teacher rows just computed are the free scoring rows (keyed by trajectory)
    assert sorted(lifecycle.teacher_logps) == ["k0", "k2"]
    for key, row in (("k0", 0), ("k2", 2)):
        assert torch.equal(lifecycle.teacher_logps[key], teacher[row])

    trainer.on_step_end()
    assert lifecycle.calls[-1] == ("end_step", 10)
    assert trainer.published[-1] == {s: {"scope": s, "version": 1, "text": f"global v1 of {s}", "items": []}
                                     for s in ("fetch", "open")}


def test_checkpoint_snapshots_after_consolidation_and_resume_restores(monkeypatch, tiny_tokenizer, tmp_path):
    lifecycle = FakeLifecycle()
    trainer = _trainer(monkeypatch, tiny_tokenizer, tmp_path, lifecycle)
    trainer._scopes = {"fetch"}
    trainer._save_checkpoint()
    folder = tmp_path / "global_step_10" / "skillduet"
    state = json.loads((folder / "verl_state.json").read_text())
    assert state == {"global_steps": 10, "end_step_done": False, "scopes": ["fetch"]}
    trainer.on_step_end()  # consolidation of step 10 happens after the save: the snapshot is rewritten
    state = json.loads((folder / "verl_state.json").read_text())
    assert state["end_step_done"] is True
    assert json.loads((folder / "bank" / "fake.json").read_text())["version"] == 1

    resumed_life = FakeLifecycle()
    resumed = _trainer(monkeypatch, tiny_tokenizer, tmp_path, resumed_life)
    resumed._restore_skill_bank(str(tmp_path / "global_step_10"))
    assert resumed_life.version == 1 and resumed._scopes == {"fetch"}
    assert [c[0] for c in resumed_life.calls] == ["restore"]  # consolidation is not repeated

    # a crash between the save and the consolidation: resume runs that step's end_step
    state["end_step_done"] = False
    (folder / "verl_state.json").write_text(json.dumps(state))
    crashed = FakeLifecycle()
    again = _trainer(monkeypatch, tiny_tokenizer, tmp_path, crashed)
    again._restore_skill_bank(str(tmp_path / "global_step_10"))
    assert [c[0] for c in crashed.calls] == ["restore", "end_step"]

    with pytest.raises(FileNotFoundError, match="skill bank"):
        again._restore_skill_bank(str(tmp_path / "global_step_99"))


def test_real_lifecycle_teacher_prompt_is_student_prompt_plus_one_span(tiny_tokenizer, tmp_path):
    """With the real SkillLifecycle, the teacher row differs from the rollout prompt only by the Local skill."""
    from skillduet_plugin.config import SkillDuetConfig
    from skillduet_plugin.skills.lifecycle import SkillLifecycle
    from skillduet_plugin.skills.types import ExtractionResult, Skill

    chat = ChatTokenizer(tiny_tokenizer)
    lifecycle = SkillLifecycle(SkillDuetConfig(), tmp_path / "bank.sqlite", tokenizer=tiny_tokenizer, env="toy")
    records, prompts, responses, masks, old = _rows(chat)
    for r in records:
        r["skillduet"]["global_version"] = None
    trajs = build_trajectories(["k0", "k1", "k2"], [r["skillduet"] for r in records[:3]], prompts[:3],
                               responses[:3], masks[:3], old[:3], step=1)
    skill = Skill(text="- Correction: open the box before taking the key.", scope="fetch", kind="correction")
    extraction = ExtractionResult(skills=[skill], assignment={"k0": skill.skill_id})
    plan = plan_teacher(prompts[:3], responses[:3], trajs, extraction, lifecycle, chat)
    student, teacher = prompts[0].tolist(), plan.contexts[0]
    head = next(i for i, (a, b) in enumerate(zip(student, teacher)) if a != b)
    tail = len(student) - head
    assert teacher[:head] == student[:head] and teacher[-tail:] == student[head:]
    assert "open the box before taking the key" in tiny_tokenizer.decode(teacher[head:len(teacher) - tail])


def test_logprob_requests_are_padded_to_whole_micro_batches(monkeypatch, tiny_tokenizer, tmp_path):
    """verl's engine asserts each rank's rows split into whole log-prob micro-batches: 3 scoring rows with
    dp=2 and micro-batches of 4 must go out as 8 rows (the real CPU loop crashed on a 3-row request)."""
    from omegaconf import open_dict

    trainer = _trainer(monkeypatch, tiny_tokenizer, tmp_path, FakeLifecycle())
    contexts, responses = [[1, 2, 3], [4, 5], [6, 7, 8, 9]], [[10, 11], [12], [13, 14, 15]]
    for micro, expected in ((4, 8), (None, 4)):  # None: only the dp multiple (the negative control)
        with open_dict(trainer.config):
            trainer.config.actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu = micro
        out = trainer._logprob_fn(contexts, responses)
        assert trainer.actor_rollout_wg.requests[-1].batch_size[0] == expected
        assert [len(o) for o in out] == [2, 1, 3]


def _step(trainer, chat, keys=("k0", "k1", "k2", "pad"), polls=()):
    """One step's old-log-prob and advantage phases; ``polls``: the prompt uids terminal at each replay-buffer
    poll before them (the per-group work of ``teacher_logprobs=rollout`` runs there)."""
    tq, batch = _step_batch(trainer, chat, keys)
    if polls:
        from verl.trainer.ppo.v1.trainer_base import PPOTrainer

        from skillduet_plugin.integrations.verl.groups import uid_of, watch_replay_buffer

        real_keys = [k for k in keys if k != "pad"]
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(PPOTrainer, "_submit_batch_to_rollout", lambda self, b: len(b["uid"]))
            uids = sorted({uid_of(k) for k in real_keys})
            trainer._submit_batch_to_rollout({"uid": uids, "extra_info": [
                {"task_id": TASKS[[uid_of(k) for k in real_keys].index(u)][0]} for u in uids]})
        buffer = FakeReplayBuffer(polls, real_keys)
        watch_replay_buffer(buffer, trainer._on_rollout_poll)
        for _ in polls:
            buffer._sync_metadata_from_transfer_queue()
            for work in trainer._groups.work.values():  # answers arrive while the rollout goes on
                if work.future is not None:
                    work.future.result(timeout=30)
            trainer.poll_log.append((sorted(buffer.finished_keys["train"]), len(trainer._server_client.requests)))
    metrics: dict = {}
    trainer._compute_old_log_prob(batch, metrics)
    teacher = tensor_rows(tq.fields[TEACHER_LOGPROBS_KEY])
    trainer._compute_advantage(batch, metrics)
    return teacher, metrics


@pytest.mark.parametrize("offset", [0.0, 1e-3])
def test_rollout_server_teacher_logprobs_and_compare_mode(monkeypatch, tiny_tokenizer, tmp_path, offset):
    """teacher_logprobs=rollout: teacher and scoring rows come from prefill requests, no actor forward, and the
    replicas sleep only after scoring; compare: both, the gaps are logged (a server off by ``offset`` shows)."""
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    from fakes import FakePrefillClient

    from skillduet_plugin.integrations.verl.settings import parse_settings

    chat = ChatTokenizer(tiny_tokenizer)
    slept: list[str] = []
    monkeypatch.setattr(PPOTrainerSync, "on_sample_end", lambda self: slept.append("sleep"))
    reference, _ = _step(_trainer(monkeypatch, tiny_tokenizer, tmp_path, FakeLifecycle(skill_rows={0, 2})), chat)

    trainer = _trainer(monkeypatch, tiny_tokenizer, tmp_path, FakeLifecycle(skill_rows={0, 2}))
    trainer.skillduet = parse_settings({"opd_coef": 0.5, "teacher_logprobs": "rollout"})
    trainer._server_client = client = FakePrefillClient(offset)
    trainer.on_sample_end()
    assert slept == []  # deferred: the servers still answer this step's prefills
    teacher, metrics = _step(trainer, chat)
    assert slept == ["sleep"] and trainer.actor_rollout_wg.requests == []
    assert len(client.requests) == 2 + 3  # two teacher rows, then the (fake) lifecycle's three scoring rows
    assert max(float((a - b).abs().max()) for a, b in zip(teacher, reference)) == pytest.approx(offset, abs=1e-7)
    assert not any(k.startswith("skillduet/check/") for k in metrics)

    trainer = _trainer(monkeypatch, tiny_tokenizer, tmp_path, FakeLifecycle(skill_rows={0, 2}))
    trainer.skillduet = parse_settings({"opd_coef": 0.5, "teacher_logprobs": "compare"})
    trainer._server_client = FakePrefillClient(offset)
    _, metrics = _step(trainer, chat)
    assert metrics["skillduet/check/logprob_max_abs_diff"] == pytest.approx(offset, abs=1e-7)
    assert (metrics["skillduet/check/opd_loss_abs_diff"] > 1e-5) == (offset > 0)
    assert (metrics["skillduet/check/strength_abs_diff"] > 1e-5) == (offset > 0)
    assert [c[0] for c in trainer.lifecycle.calls if c[0].startswith("score")] == ["score_unrecorded", "score"]


def test_rollout_teacher_logprobs_refuse_other_temperatures(tmp_path):
    from skillduet_plugin.config import ConfigError
    from skillduet_plugin.integrations.verl.settings import parse_settings
    from skillduet_plugin.integrations.verl.trainer import SkillDuetTrainer
    from skillduet_plugin.main_ppo import compose

    with pytest.raises(ConfigError, match="teacher_logprobs=rollout needs actor_rollout_ref.rollout.temperature"):
        SkillDuetTrainer(compose(["trainer.plugins=[skillduet]", f"trainer.default_local_dir={tmp_path}",
                                  "skillduet.teacher_logprobs=rollout", "actor_rollout_ref.rollout.temperature=0.7"]))
    with pytest.raises(ConfigError, match="skillduet.teacher_logprobs='server' is invalid: allowed values are actor"):
        parse_settings({"teacher_logprobs": "server"})


class FakeReplayBuffer:
    """verl's replay-buffer surface the per-group work reads: each metadata sync makes the next poll's uids
    terminal (``finished``) and lists the trajectory keys in TransferQueue."""

    def __init__(self, polls, keys):
        self.polls, self.keys, self.n = list(polls), list(keys), 0
        self.finished_keys, self.failure_keys, self.partitions = {"train": set()}, {"train": set()}, {"train": {}}

    def _sync_metadata_from_transfer_queue(self):
        from skillduet_plugin.integrations.verl.groups import uid_of

        self.finished_keys["train"] = set(self.polls[self.n])
        self.partitions["train"] = {k: {} for k in self.keys if uid_of(k) in self.finished_keys["train"]}
        self.n += 1


PER_GROUP_CASES = {  # polls (terminal uids at each) -> poll log, extraction calls, groups (before the final poll)
    # and teacher rows prefetched
    "every-group-during-rollout": ([["ub"], ["ua", "ub"]], [(["ub"], 1), (["ua", "ub"], 2)],
                                   [("analyze", ["ub_0_0"]), ("analyze", ["ua_0_0", "ua_1_0"])], (2, 1), 2),
    "two-groups-at-one-poll": ([["ua", "ub"]], [(["ua", "ub"], 2)],
                               [("analyze", ["ua_0_0", "ua_1_0", "ub_0_0"])], (2, 0), 2),  # one analyzer call
    "last-group-with-the-batch": ([["ub"]], [(["ub"], 1)],  # ua never seen complete: done with the batch
                                  [("analyze", ["ub_0_0"]), ("analyze", ["ua_0_0", "ua_1_0"])], (1, 0), 1),
}


@pytest.mark.parametrize("case", list(PER_GROUP_CASES))
def test_rollout_teacher_prefills_go_out_per_group_during_the_rollout(monkeypatch, tiny_tokenizer, tmp_path, case):
    """teacher_logprobs=rollout: a task group's extraction and teacher prefills start at the replay-buffer poll
    where all its prompts are done, before the other groups finish; the step's skills, teacher rows, OPD mask
    and scoring equal the whole-batch path's (the actor's, here), and no teacher row is requested twice."""
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    from fakes import FakePrefillClient

    from skillduet_plugin.integrations.verl.settings import parse_settings

    polls, poll_log, analyzed, groups, rows = PER_GROUP_CASES[case]
    chat = ChatTokenizer(tiny_tokenizer)
    monkeypatch.setattr(PPOTrainerSync, "on_sample_end", lambda self: None)
    keys = ("ua_0_0", "ua_1_0", "ub_0_0", "pad")  # verl's {uid}_{session}_{index}: ua = toy-3 x 2, ub = toy-0
    skill_keys = {"ua_0_0", "ub_0_0"}
    reference = _trainer(monkeypatch, tiny_tokenizer, tmp_path, FakeLifecycle(skill_keys=skill_keys))
    ref_teacher, ref_metrics = _step(reference, chat, keys)

    trainer = _trainer(monkeypatch, tiny_tokenizer, tmp_path, FakeLifecycle(skill_keys=skill_keys))
    trainer.skillduet = parse_settings({"opd_coef": 0.5, "teacher_logprobs": "rollout"})
    trainer._server_client, trainer.poll_log = FakePrefillClient(), []
    teacher, metrics = _step(trainer, chat, keys, polls=polls)
    # every poll sent the prefills of the groups it saw complete (toy-0's while toy-3 was still rolling out)
    assert trainer.poll_log == poll_log
    calls = [c for c in trainer.lifecycle.calls if c[0] in ("extract", "analyze", "record_extraction")]
    assert calls == [(name, ids, 10) for name, ids in analyzed] + [("record_extraction", ["ua_0_0", "ub_0_0"], 3, 10)]
    assert (metrics["skillduet/groups_prefetched"], metrics["skillduet/groups_prefetched_early"]) == groups
    assert metrics["skillduet/teacher_rows_prefetched"] == rows
    teacher_requests = [r for r, _ in trainer._server_client.requests[:2]]
    assert len(trainer._server_client.requests) == 2 + 3  # two teacher rows (never twice), three scoring rows
    assert len(set(map(tuple, teacher_requests))) == 2
    assert len(ref_teacher) == len(teacher) == 4
    for a, b in zip(teacher, ref_teacher):
        assert torch.equal(a, b)
    assert metrics["skillduet/opd_trajectory_ratio"] == ref_metrics["skillduet/opd_trajectory_ratio"] == 2 / 3
    scored = [c for c in trainer.lifecycle.calls if c[0] == "score"][0]
    ref_scored = [c for c in reference.lifecycle.calls if c[0] == "score"][0]
    # the same skills (the fake analyzer does not order them by group as the real one does) and scoring rows
    assert sorted(scored[1]) == sorted(ref_scored[1])
    assert len(scored[3]) == len(ref_scored[3]) and all(torch.equal(x, y) for x, y in zip(scored[3], ref_scored[3]))
    assert sorted(trainer.lifecycle.teacher_logps) == ["ua_0_0", "ub_0_0"]


def test_group_work_is_used_only_for_the_exact_trajectories_of_the_batch():
    from skillduet_plugin.integrations.verl.groups import GroupWork

    groups = GroupPrefetch()
    groups.submitted(["ua", "ub", "uc"], ["t1", "t2", "t1"], step=3)
    assert groups.ready({"ua"}, 3) == [] and groups.ready({"ua", "ub"}, 4) == []  # t1 waits for uc; wrong step
    assert groups.ready({"ua", "ub", "uc"}, 3) == [("t1", {"ua", "uc"}), ("t2", {"ub"})]
    for task, keys in (("t1", {"ua_0_0", "uc_0_0"}), ("t2", {"ub_0_0"})):
        groups.add(GroupWork((task,), frozenset(keys), part=(None, None)))
    assert groups.ready({"ua", "ub", "uc"}, 3) == []  # started once
    taken = groups.take({"t1": {"ua_0_0", "uc_0_0"}, "t2": {"ub_0_0", "ub_1_0"}}, step=3)
    assert [w.task_ids for w in taken] == [("t1",)]  # t2's batch holds a trajectory its group work never saw
    assert groups.work == {} and groups.take({"t1": {"ua_0_0", "uc_0_0"}}, step=3) == []
    # groups analysed together at one poll are used together or not at all
    groups.submitted(["ua", "ub"], ["t1", "t2"], step=4)
    groups.add(GroupWork(("t1", "t2"), frozenset({"ua_0_0", "ub_0_0"}), part=(None, None)))
    assert groups.ready({"ua", "ub"}, 4) == []
    assert groups.take({"t1": {"ua_0_0"}, "t2": {"ub_0_0", "ub_1_0"}}, step=4) == []


def test_a_group_without_trajectories_is_left_to_the_batch(monkeypatch, tiny_tokenizer, tmp_path, caplog):
    """verl marks a group terminal (``failure``) when every session failed: nothing to fetch, no warning."""
    from skillduet_plugin.integrations.verl.settings import parse_settings

    trainer = _trainer(monkeypatch, tiny_tokenizer, tmp_path, FakeLifecycle())
    trainer.skillduet = parse_settings({"opd_coef": 0.5, "teacher_logprobs": "rollout"})
    trainer._groups.submitted(["ua"], ["toy-3"], trainer.global_steps)
    buffer = FakeReplayBuffer([["ua"]], [])
    buffer.failure_keys["train"] = {"ua"}
    trainer._tq_get_keys = lambda keys, fields: pytest.fail("nothing to fetch")
    buffer._sync_metadata_from_transfer_queue()
    trainer._on_rollout_poll(buffer)
    assert trainer._groups.work == {} and "failed" not in caplog.text


def test_a_fresh_start_refuses_a_lost_bank_next_to_its_checkpoints(monkeypatch, tiny_tokenizer, tmp_path):
    """As on TRL: the bank file is gone but checkpoints hold snapshots of it, so starting a new bank would pair
    the history with an empty Global; verl's fresh start (no checkpoint loaded) stops with the fix instead."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from skillduet_plugin.skills.bank import BankError
    from skillduet_plugin.skills.types import Skill

    def fresh_start(self):
        self.global_steps = 0

    monkeypatch.setattr(PPOTrainer, "_load_checkpoint", fresh_start)
    first = _trainer(monkeypatch, tiny_tokenizer, tmp_path, None)
    first._load_checkpoint()  # no history yet: a new bank
    first.lifecycle.bank.add_candidates([Skill(text="Open the box first.", scope="fetch", kind="shared")], 1)
    first._snapshot_skill_bank(str(tmp_path / "global_step_10"), end_step_done=True)
    first.lifecycle.close()
    bank_path = first.skillduet.resolved_bank_path(str(tmp_path))
    again = _trainer(monkeypatch, tiny_tokenizer, tmp_path, None)
    again._load_checkpoint()  # the bank is still there: the run goes on with it
    again.lifecycle.close()
    os.remove(bank_path)
    lost = _trainer(monkeypatch, tiny_tokenizer, tmp_path, None)
    with pytest.raises(BankError, match="is missing or empty, but 1 snapshot.*global_step_10.*resume with "
                                        "trainer.resume_mode=auto"):
        lost._load_checkpoint()


def test_start_up_publishes_the_globals_a_bank_already_holds(monkeypatch, tiny_tokenizer, tmp_path):
    """A bank that already holds Globals (``skillduet.bank_path`` of an earlier run, or the step-overhead bench's
    seeded one) serves them from the first rollout, before any task of their scope was played."""
    from skillduet_plugin.config import SkillDuetConfig
    from skillduet_plugin.skills.lifecycle import SkillLifecycle

    def started(name, globals_by_scope):
        life = SkillLifecycle(SkillDuetConfig(), tmp_path / f"{name}.sqlite", tokenizer=tiny_tokenizer,
                              analyzer=object(), synthesizer=object(), similarity=None)
        if globals_by_scope:
            life.bank.commit_consolidation(0, [{"scope": s, "items": [t], "text": f"- {t}", "selector": "seeded",
                                                "report": {}} for s, t in globals_by_scope.items()])
        trainer = _trainer(monkeypatch, tiny_tokenizer, tmp_path / name, life)
        trainer._publish_bank_globals()
        life.close()
        return trainer

    trainer = started("seeded", {"pick": "take the mug first", "heat": "use the microwave"})
    assert trainer.published == [{s: {"scope": s, "version": 1, "text": f"- {t}", "items": [t]}
                                  for s, t in (("heat", "use the microwave"), ("pick", "take the mug first"))}]
    assert trainer._scopes == {"heat", "pick"}
    assert started("empty", {}).published == []  # an empty bank: nothing to serve yet
