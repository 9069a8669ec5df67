"""Local skill extraction: group a step's trajectories by task, pair a success with a failure, ask the analyzer.

Rules (the paper's step 2):
- Only ``split == "train"`` trajectories are analysed; validation trajectories never produce candidates.
- A group (the rollouts of one task at one step) with both a success and a failure yields ONE ``shared`` skill
  from one pair: the success with the highest reward and the failure with the lowest reward, ties broken by the
  smaller ``traj_id``. Every trajectory of the group gets the shared skill as teacher context.
- Any other group yields one skill per eligible trajectory (at least one action): a ``procedure`` from a
  success, a ``correction`` from a failure; each trajectory's teacher context is its own skill (hindsight).
- Trajectories whose request failed or whose answer was rejected (``skills.judge``: not advice) get no
  assignment (no OPD term): never the reply as it came.
All analyzer requests of a step go to the backend in one ``generate`` call. Each asks for at most
``reply_tokens`` tokens (a Local skill never needs more than its teacher-prompt budget), and ``max_requests``
bounds a call's requests: the jobs are taken round-robin over the groups (every group's first job before any
group's second), and those beyond the bound are not sent (counted in ``ExtractionStats.capped``).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from skillduet_plugin.llm.base import ChatRequest
from skillduet_plugin.llm.reply_form import SKILL_FORM
from skillduet_plugin.skills.prompts import render as render_prompt
from skillduet_plugin.skills.render import DEFAULT_RENDER_TOKENS, render_trajectory, trajectory_payload, turns
from skillduet_plugin.skills.judge import judge_skill_reply
from skillduet_plugin.skills.types import ExtractionResult, Skill, Trajectory

SKIP_VALIDATION = "validation_split"
SKIP_NO_ACTIONS = "no_actions"
#: reply tokens on top of a skill's own budget: the answer tags and a short lead-in
REPLY_MARGIN_TOKENS = 32


@dataclass
class LocalJob:
    """One analyzer request and the trajectories whose teacher context its answer becomes."""

    kind: str  # shared | procedure | correction
    scope: str
    task_id: str
    task: str
    env: str
    sources: tuple[str, ...]
    assign_to: tuple[str, ...]
    request: ChatRequest


@dataclass
class ExtractionStats:
    """Counts of one extraction call, for metrics."""

    trajectories: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    requests: int = 0
    failures: int = 0
    rejected: int = 0
    skills: int = 0
    assigned: int = 0
    capped: int = 0


def group_by_task(trajectories: Iterable[Trajectory]) -> "OrderedDict[str, list[Trajectory]]":
    """Trajectories by ``group_key`` (step and task), groups and members in a deterministic order."""
    groups: dict[str, list[Trajectory]] = {}
    for t in trajectories:
        groups.setdefault(t.group_key, []).append(t)
    return OrderedDict((k, sorted(groups[k], key=lambda t: t.order_key)) for k in sorted(groups))


def choose_pair(group: Sequence[Trajectory]) -> tuple[Trajectory, Trajectory] | None:
    """The (success, failure) pair of a group: highest-reward success, lowest-reward failure, ties by
    ``Trajectory.order_key``."""
    successes = [t for t in group if t.success]
    failures = [t for t in group if not t.success]
    if not successes or not failures:
        return None
    best = min(successes, key=lambda t: (-float(t.reward), t.order_key))
    worst = min(failures, key=lambda t: (float(t.reward), t.order_key))
    return best, worst


def _env_of(traj: Trajectory, default: str) -> str:
    return str((traj.metadata or {}).get("env") or default)


def plan_jobs(trajectories: Sequence[Trajectory], *, env: str = "", render_tokens: int = DEFAULT_RENDER_TOKENS,
              tokenizer: Any = None, reply_tokens: int | None = None) -> tuple[list[LocalJob], dict[str, int]]:
    """The analyzer requests for ``trajectories`` (each asking for at most ``reply_tokens``) and the count of
    skipped trajectories by reason."""
    skipped: dict[str, int] = {}
    eligible = []
    for t in trajectories:
        if t.split != "train":
            skipped[SKIP_VALIDATION] = skipped.get(SKIP_VALIDATION, 0) + 1
        elif not turns(t)[0]:
            skipped[SKIP_NO_ACTIONS] = skipped.get(SKIP_NO_ACTIONS, 0) + 1
        else:
            eligible.append(t)
    jobs: list[LocalJob] = []
    for group in group_by_task(eligible).values():
        first = group[0]
        env_name = _env_of(first, env)
        common = {"env": env_name, "task": first.task, "scope": first.scope}
        pair = choose_pair(group)
        if pair is not None:
            success, failure = pair
            payload = dict(common, kind="local_pair", success=trajectory_payload(success),
                           failure=trajectory_payload(failure))
            system, user = render_prompt(
                "local_pair", env=env_name, scope=first.scope, task=first.task,
                success=render_trajectory(success, render_tokens, tokenizer),
                failure=render_trajectory(failure, render_tokens, tokenizer))
            jobs.append(LocalJob("shared", first.scope, first.task_id, first.task, env_name,
                                 (success.traj_id, failure.traj_id), tuple(t.traj_id for t in group),
                                 ChatRequest(_messages(system, user), payload, reply_tokens, SKILL_FORM)))
            continue
        for t in group:
            kind, template = ("procedure", "local_procedure") if t.success else ("correction", "local_correction")
            payload = dict(common, kind=template, trajectory=trajectory_payload(t))
            system, user = render_prompt(template, env=env_name, scope=t.scope, task=t.task,
                                         trajectory=render_trajectory(t, render_tokens, tokenizer))
            jobs.append(LocalJob(kind, t.scope, t.task_id, t.task, env_name, (t.traj_id,), (t.traj_id,),
                                 ChatRequest(_messages(system, user), payload, reply_tokens, SKILL_FORM)))
    return jobs, skipped


def cap_jobs(jobs: Sequence[LocalJob], max_requests: int) -> tuple[list[LocalJob], int]:
    """At most ``max_requests`` jobs (0: all), taken round-robin over their groups in plan order, so every group
    gets a request before any group gets a second; returns ``(kept in plan order, number dropped)``."""
    if max_requests <= 0 or len(jobs) <= max_requests:
        return list(jobs), 0
    rank: dict[int, tuple[int, int]] = {}
    seen: dict[tuple[str, str], int] = {}
    groups: dict[tuple[str, str], int] = {}
    for i, job in enumerate(jobs):
        key = (job.task_id, job.scope)
        groups.setdefault(key, len(groups))
        rank[i] = (seen.get(key, 0), groups[key])
        seen[key] = seen.get(key, 0) + 1
    keep = sorted(sorted(range(len(jobs)), key=lambda i: rank[i])[:max_requests])
    return [jobs[i] for i in keep], len(jobs) - len(keep)


def _messages(system: str, user: str) -> list[dict[str, str]]:
    msgs = [{"role": "system", "content": system}] if system else []
    return msgs + [{"role": "user", "content": user}]


def extract_local(trajectories: Sequence[Trajectory], step: int, backend: Any, *, max_chars: int,
                  special_tokens: Sequence[str] = (), env: str = "", render_tokens: int = DEFAULT_RENDER_TOKENS,
                  tokenizer: Any = None, reply_tokens: int | None = None,
                  max_requests: int = 0) -> tuple[ExtractionResult, ExtractionStats]:
    """Run the analyzer once over the step's jobs (at most ``max_requests``, 0: all) and turn answers into
    sanitised Local skills."""
    jobs, skipped = plan_jobs(trajectories, env=env, render_tokens=render_tokens, tokenizer=tokenizer,
                              reply_tokens=reply_tokens)
    jobs, capped = cap_jobs(jobs, max_requests)
    stats = ExtractionStats(trajectories=len(trajectories), skipped=skipped, requests=len(jobs), capped=capped)
    result = ExtractionResult()
    if not jobs:
        return result, stats
    answers = backend.generate([job.request for job in jobs])
    if len(answers) != len(jobs):
        raise RuntimeError(f"analyzer returned {len(answers)} answers for {len(jobs)} requests")
    by_id: dict[str, Skill] = {}
    copies = bool(getattr(backend, "may_copy_prompt", True))  # an LLM's copied prompt lines are not a skill
    for job, answer in zip(jobs, answers):
        if answer is None:
            result.failures += 1
            result.rejected.append(("backend_failed", f"{job.kind} skill of {','.join(job.sources)}"))
            continue
        verdict = judge_skill_reply(answer, job.request.messages, task=job.task, max_chars=max_chars,
                                    special_tokens=special_tokens, copies=copies)
        if verdict.text is None:
            result.rejected.append((str(verdict.reason), f"{job.kind} skill of {','.join(job.sources)}"))
            continue
        metadata = {"task_id": job.task_id, "task": job.task, "env": job.env}
        if verdict.instance_terms:  # this game's object ids the skill names: never carried into a Global
            metadata["instance_terms"] = verdict.instance_terms
        skill = Skill(text=verdict.text, scope=job.scope, kind=job.kind, source_traj_ids=job.sources, step=step,
                      metadata=metadata)
        if skill.skill_id in by_id:  # the same advice found twice: one skill, both sources
            known = by_id[skill.skill_id]
            known.source_traj_ids = tuple(dict.fromkeys(known.source_traj_ids + job.sources))
        else:
            by_id[skill.skill_id] = skill
            result.skills.append(skill)
        for traj_id in job.assign_to:
            result.assignment[traj_id] = skill.skill_id
    stats.failures = result.failures
    stats.rejected = len(result.rejected) - result.failures
    stats.skills = len(result.skills)
    stats.assigned = len(result.assignment)
    return result, stats


def merge_extractions(parts: Sequence[tuple[ExtractionResult, ExtractionStats]]) -> tuple[ExtractionResult,
                                                                                          ExtractionStats]:
    """One step's extraction from parts that each analysed whole rollout groups (``group_key``), e.g. groups
    analysed as soon as they were complete plus the rest at the end of the rollout.

    Equal to one ``extract_local`` call over all the parts' trajectories: jobs are per group, skills are taken
    in group order, and the same advice text found in two parts is one skill with both parts' sources (their
    order may differ from a single call's; they are used as a set) and both assignments.
    """
    result, stats = ExtractionResult(), ExtractionStats()
    by_id: dict[str, Skill] = {}
    skills = [s for part, _ in parts for s in part.skills]
    for skill in sorted(skills, key=lambda s: f"{s.step}:{(s.metadata or {}).get('task_id', '')}"):
        known = by_id.get(skill.skill_id)
        if known is None:
            by_id[skill.skill_id] = skill
            result.skills.append(skill)
        else:
            known.source_traj_ids = tuple(dict.fromkeys(known.source_traj_ids + skill.source_traj_ids))
    for part, part_stats in parts:
        result.assignment.update(part.assignment)
        result.failures += part.failures
        result.rejected.extend(part.rejected)
        stats.trajectories += part_stats.trajectories
        stats.requests += part_stats.requests
        stats.capped += part_stats.capped
        stats.rejected += part_stats.rejected
        for reason, n in part_stats.skipped.items():
            stats.skipped[reason] = stats.skipped.get(reason, 0) + n
    stats.failures = result.failures
    stats.skills = len(result.skills)
    stats.assigned = len(result.assignment)
    return result, stats
