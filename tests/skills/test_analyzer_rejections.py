"""Rejected analyzer replies in the lifecycle: counted by the judge's reason (``analyzer/rejected/<reason>``), shown by
``skillduet skills show`` and the tracker's table; a step whose every reply is rejected leaves its trajectories
without a Local skill (so without an OPD term) and says so in its metrics, never storing the echo."""

from __future__ import annotations

from test_skill_lifecycle import _length_logprob_fn, _step_trajectories
from test_skill_tracking import RecordingWriter

from skillduet_plugin.config import SkillDuetConfig
from skillduet_plugin.core.conversation import ChatTokenizer
from skillduet_plugin.skills.bank import BANK_FILENAME
from skillduet_plugin.skills.lifecycle import SkillLifecycle
from skillduet_plugin.skills.tracking import REJECTED_COLUMNS, TrackerBridge


class EchoBackend:
    """A small analyzer that copies its prompt back (its transcript), or, for pair prompts, writes ``advice``."""

    def __init__(self, advice: str | None = None) -> None:
        self.advice = advice
        self.failures = 0

    def generate(self, requests):
        return [f"<skill>{self.advice}</skill>" if self.advice and r.payload["kind"] == "local_pair"
                else r.messages[-1]["content"] for r in requests]


def _lifecycle(tmp_path, tokenizer, analyzer, name=BANK_FILENAME):
    return SkillLifecycle(SkillDuetConfig(consolidation_interval=1), tmp_path / name, tokenizer=tokenizer,
                          analyzer=analyzer, synthesizer=EchoBackend(), similarity=None)


def test_a_step_whose_every_reply_is_rejected_has_no_local_skill_and_says_so(tmp_path, tiny_tokenizer, capsys):
    from skillduet_plugin.commands.skills import run as skills_run
    from skillduet_plugin.skills.teacher_plan import plan_teacher

    lc = _lifecycle(tmp_path, tiny_tokenizer, EchoBackend())
    writer = RecordingWriter()
    lc.tracker = TrackerBridge([writer])
    chat = ChatTokenizer(tiny_tokenizer)
    trajs = _step_trajectories(1, chat, lc)
    result = lc.extract(trajs, 1)
    m = lc.metrics()
    # 8 requests, each the prompt copied back: nothing stored, nobody assigned, the reason counted
    assert result.skills == [] and result.assignment == {} and lc.bank.candidates() == []
    assert m["analyzer/rejected/prompt_structure"] == 8 and m["skills/rejected"] == 8
    assert m["analyzer/step_all_rejected"] == 1.0 and m["analyzer/step_accepted"] == 0.0
    assert m["analyzer/step_without_local_skill"] == 12.0  # every train trajectory (the val one is skipped)
    assert m["skills/analyzer_all_rejected_steps"] == 1.0
    # the teacher plan has no row to supervise: OPD is off for those trajectories this step
    rows = list(enumerate(t for t in trajs if t.split == "train"))
    plan = plan_teacher([t.prompt_ids for _, t in rows], [t.completion_ids for _, t in rows], rows, result, lc, chat)
    assert plan.num_supervised == 0
    # the tracker's table and `skillduet skills show` name the reason
    [(_, tag, step, columns, table_rows)] = [c for c in writer.calls if c[1].endswith("analyzer_rejected")]
    assert columns == REJECTED_COLUMNS and step == 1
    assert table_rows[0][:2] == ["prompt_structure", 8] and table_rows[-1][:2] == ["(accepted)", 0]
    lc.close()

    class Args:
        action, run_dir, scope, candidates = "show", str(tmp_path), None, 10

    assert skills_run(Args()) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "rejected: prompt_structure" in shown and "8 answered" in shown and "no OPD term: 1" in shown


def test_rejections_accumulate_by_reason_and_survive_a_restore(tmp_path, tiny_tokenizer):
    advice = "Open the drawer before you put the knife in it."
    lc = _lifecycle(tmp_path, tiny_tokenizer, EchoBackend(advice))
    chat = ChatTokenizer(tiny_tokenizer)
    trajs = _step_trajectories(1, chat, lc)
    result = lc.extract(trajs, 1)
    lc.score(result.skills, trajs, _length_logprob_fn, assignment=result.assignment)
    m = lc.metrics()
    # 2 pair prompts answered with advice (one skill, the same text in both scopes is two skills), 6 echoed
    assert [s.text for s in result.skills] == [advice, advice] and m["analyzer/rejected/prompt_structure"] == 6
    assert m["analyzer/step_all_rejected"] == 0.0 and m["analyzer/step_accepted"] == 2.0
    assert m["analyzer/step_without_local_skill"] == 6.0  # the all-failure groups' trajectories
    # negative control of the all-rejected step: here the pair groups' 6 trajectories are supervised
    from skillduet_plugin.skills.teacher_plan import plan_teacher

    rows = list(enumerate(t for t in trajs if t.split == "train"))
    plan = plan_teacher([t.prompt_ids for _, t in rows], [t.completion_ids for _, t in rows], rows, result, lc, chat)
    assert plan.num_supervised == 6
    lc.snapshot(tmp_path / "snap")
    lc.extract(_step_trajectories(2, chat, lc), 2)
    assert lc.metrics()["analyzer/rejected/prompt_structure"] == 12
    lc.restore(tmp_path / "snap")
    assert lc.metrics()["analyzer/rejected/prompt_structure"] == 6
    lc.close()
