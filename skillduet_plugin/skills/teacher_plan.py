"""The per-step teacher plan, one for every trainer: which batch rows get a teacher context, and with what.

A row's teacher context is its skill-free first prompt with its Local skill inserted at message level by the
lifecycle (``teacher_messages``, with the Global version the student rolled out with), re-rendered with the chat
template; its response is the *same* tokens the policy produced. A row gets none (it reuses the student prompt
and is masked out of OPD) when the step's extraction assigned it no skill, the episode failed, it has no prompt
messages, or the skill renders to no section at all (teacher = student would distil nothing).

Which Strength rows come free from this teacher pass and which need extra forwards under the step's budget is
``skills.teacher_scoring.plan_scoring`` (``SkillLifecycle.plan_scores`` / ``score``); whether a step needs a
teacher pass and whether Strength is read from it, the config says once (``SkillDuetConfig.needs_teacher_pass``,
``SkillDuetConfig.scores_from_teacher_pass``). The adapters (TRL, verl) call :func:`plan_teacher` and only
translate the plan into their tensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from skillduet_plugin.skills.types import ExtractionResult, Skill, Trajectory


@dataclass
class TeacherPlan:
    """One teacher context per batch row; rows without a Local skill keep the student prompt (``skills[i]`` None)."""

    contexts: list[list[int]]
    responses: list[list[int]]
    skills: list[Skill | None]

    @property
    def has_skill(self) -> list[bool]:
        return [s is not None for s in self.skills]

    @property
    def rows(self) -> list[int]:
        """The rows that have a teacher context (the rows of the teacher pass)."""
        return [i for i, s in enumerate(self.skills) if s is not None]

    @property
    def num_supervised(self) -> int:
        return len(self.rows)


def plan_teacher(student_prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]],
                 trajectories: Sequence[tuple[int, Trajectory]], extraction: ExtractionResult, lifecycle: Any,
                 chat: Any) -> TeacherPlan:
    """The teacher context of every row of a batch.

    Args:
        student_prompts / responses: token ids per row, as rolled out.
        trajectories: ``(row, Trajectory)`` of the rows the lifecycle knows (other rows keep the student prompt).
        extraction: this step's Local skills; ``extraction.skill_for(traj_id)`` is a row's teacher skill.
        lifecycle: ``SkillLifecycle`` (its ``teacher_messages`` inserts the Local skill at message level).
        chat: ``ChatTokenizer`` of the policy.
    A row that gets a teacher context has its ``Trajectory.local_skill_id`` set to the skill.
    """
    if len(student_prompts) != len(responses):
        raise ValueError(f"{len(student_prompts)} prompts but {len(responses)} responses")
    contexts = [list(map(int, p)) for p in student_prompts]
    skills: list[Skill | None] = [None] * len(contexts)
    for row, traj in trajectories:
        skill = extraction.skill_for(traj.traj_id)
        if skill is None or not traj.prompt_messages or traj.metadata.get("error") is not None:
            continue
        # the Global version that was in the rollout prompt, so teacher = student prompt + Local skill
        messages = lifecycle.teacher_messages(traj.prompt_messages, task=traj.task, scope=traj.scope,
                                              local_skill=skill, global_version=traj.global_version)
        ids = list(chat.prompt_ids(messages))
        if ids == contexts[row]:  # the skill rendered to no section: teacher = student would distil nothing
            continue
        contexts[row] = ids
        skills[row] = skill
        traj.local_skill_id = skill.skill_id
    return TeacherPlan(contexts=contexts, responses=[list(map(int, r)) for r in responses], skills=skills)


__all__ = ["TeacherPlan", "plan_teacher"]
