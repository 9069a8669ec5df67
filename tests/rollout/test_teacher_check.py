"""The teacher check (``rollout.teacher_check``): which Local skill a task's teacher gets, what its prompt holds,
and how its success is counted against the student's."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from skillduet_plugin.rollout.teacher_check import (first_skill_per_task, local_skill_fn, skills_by_task,
                                                    teacher_check)
from skillduet_plugin.skills.inject import GLOBAL_HEADER, LOCAL_HEADER
from skillduet_plugin.skills.types import GlobalSkills, Skill

PROMPT = [{"role": "system", "content": "You are an agent."},
          {"role": "user", "content": "Your task is to: put a mug in cabinet.\nYou are in the middle of a room."}]


def skill(text: str, task: str, step: int = 1, kind: str = "procedure") -> Skill:
    return Skill(text=text, scope="pick", kind=kind, step=step, metadata={"task_id": task})


@dataclass
class FakeLifecycle:
    """The lifecycle calls the check makes: the Global of a scope and the two prompt builders."""

    use_global: bool = True
    global_text: str = "Search cabinets first."
    calls: list = field(default_factory=list)

    @property
    def config(self):
        return self

    def global_for(self, scope):
        return GlobalSkills(scope=scope, version=3 if self.use_global else None,
                            text=self.global_text if self.use_global else "")

    def _with(self, prompt, sections):
        messages = [dict(m) for m in prompt]
        messages[1]["content"] += "".join(f"\n{s}" for s in sections if s)
        return messages

    def student_messages(self, prompt, *, task, scope, global_version=None):
        return self._with(prompt, [f"{GLOBAL_HEADER}\n{self.global_for(scope).text}" if self.use_global else ""])

    def teacher_messages(self, prompt, *, task, scope, local_skill, global_version=None):
        self.calls.append(global_version)
        return self._with(prompt, [f"{GLOBAL_HEADER}\n{self.global_for(scope).text}" if self.use_global else "",
                                   f"{LOCAL_HEADER}\n{local_skill.text}"])


@dataclass
class Ep:
    task_id: str
    won: bool


def reading_player(prompts):
    """A player that wins exactly when its prompt names 'cabinet 2' (the skill's content)."""

    def play(task_ids, fns):
        out = []
        for task, fn in zip(task_ids, fns):
            messages = fn(PROMPT, "put a mug in cabinet.", "pick")[0] if fn is not None else PROMPT
            prompts.append((task, messages[1]["content"]))
            out.append(Ep(task, "cabinet 2" in messages[1]["content"]))
        return out

    return play


def test_skills_by_task_takes_each_task_first_row_with_a_skill():
    a1, a2, b = skill("a1", "A"), skill("a2", "A"), skill("b", "B")
    assert skills_by_task(["A", "A", "B", "C"], [None, a1, b, None]) == {"A": a1, "B": b}
    assert skills_by_task(["A", "A"], [a2, a1]) == {"A": a2}
    with pytest.raises(ValueError, match="2 row skills for 3 rows"):
        skills_by_task(["A", "B", "C"], [a1, b])


def test_first_skill_per_task_earliest_step_then_kind_then_id():
    late = skill("late shared", "A", step=3, kind="shared")
    early_corr = skill("early correction", "A", step=1, kind="correction")
    early_proc = skill("early procedure", "A", step=1, kind="procedure")
    other = skill("other", "B", step=1, kind="shared")
    glob = Skill(text="g", scope="pick", kind="global", step=0, metadata={"task_id": "A"})
    chosen = first_skill_per_task([late, early_corr, glob, early_proc, other], ["A", "C"])
    assert chosen == {"A": early_proc}  # step 1 before 3, a procedure before a correction; no Global; C has none
    assert first_skill_per_task([late, early_corr], ["A"]) == {"A": early_corr}


def test_teacher_prompt_is_the_opd_teacher_context():
    life = FakeLifecycle()
    messages, version = local_skill_fn(life, skill("Go to cabinet 2.", "A"))(PROMPT, "put a mug in cabinet.", "pick")
    assert version == 3 and life.calls == [3]  # the Global in force, as in the rollout
    assert GLOBAL_HEADER in messages[1]["content"] and "Go to cabinet 2." in messages[1]["content"]
    life = FakeLifecycle(use_global=False)
    messages, version = local_skill_fn(life, skill("Go to cabinet 2.", "A"))(PROMPT, "put a mug in cabinet.", "pick")
    assert version is None and GLOBAL_HEADER not in messages[1]["content"]


def test_teacher_check_counts_each_condition_on_its_own_episodes():
    prompts: list = []
    skills = {"A": skill("The mug was in cabinet 2.", "A"), "B": skill("The mug was in drawer 1.", "B")}
    result = teacher_check(skills, lifecycle=FakeLifecycle(), samples=3, play=reading_player(prompts))
    # A's teacher reads 'cabinet 2' and wins its 3 episodes; B's skill names another place; students never win
    assert result["teacher_success"] == pytest.approx(3 / 6) and result["student_success"] == 0.0
    assert result["teacher_minus_student"] == pytest.approx(0.5)
    assert result["outcomes"] == {"A": {"teacher": 1.0, "student": 0.0}, "B": {"teacher": 0.0, "student": 0.0}}
    assert result["tasks"] == 2 and result["episodes"] == 6 and len(prompts) == 12
    students = [p for _, p in prompts[6:]]
    assert all(LOCAL_HEADER not in p and GLOBAL_HEADER in p for p in students)  # the rollout's prompt
    # negative control: a player that ignores the prompt sees no difference
    flat = teacher_check(skills, lifecycle=FakeLifecycle(), samples=2,
                         play=lambda ids, fns: [Ep(t, True) for t in ids])
    assert flat["teacher_minus_student"] == 0.0


def test_teacher_check_without_tasks_and_bad_samples():
    empty = teacher_check({}, lifecycle=FakeLifecycle(), samples=2, play=lambda ids, fns: [])
    assert empty["teacher_success"] is None and empty["episodes"] == 0
    with pytest.raises(ValueError, match="samples=0"):
        teacher_check({"A": skill("x", "A")}, lifecycle=FakeLifecycle(), samples=0, play=lambda ids, fns: [])
    with pytest.raises(RuntimeError, match="returned 1 episodes for 4"):
        teacher_check({"A": skill("x", "A")}, lifecycle=FakeLifecycle(), samples=2,
                      play=lambda ids, fns: [Ep("A", True)])
