"""Per-group Local extraction and teacher prefills during verl's rollout (``skillduet.teacher_logprobs=rollout``
or ``compare``): the bookkeeping between the prompts verl submits, the groups its replay buffer sees finish, and
the step's batch.

verl's V1 sync trainer submits the step's prompts, then its replay buffer polls TransferQueue until enough
prompt groups are terminal. Every poll, the trainer looks for *task groups* (``Trajectory.group_key``: every
prompt of one task in this step) whose prompts are all terminal, and right away analyses that group (the
lifecycle's ``analyze``: the same per-group analyzer jobs a whole-step extraction runs) and sends its teacher
prefill requests to the rollout servers, which answer them next to the episodes still being played. At the
step's old-log-prob phase the trainer takes the work of every task group whose trajectories are exactly the
batch's, extracts the rest as before, and merges (``skills.extract.merge_extractions``): the step's skills and
teacher rows equal the whole-batch path's (tested), only issued earlier.
"""

from __future__ import annotations

import concurrent.futures
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from skillduet_plugin.skills.extract import merge_extractions
from skillduet_plugin.skills.teacher_plan import plan_teacher

logger = logging.getLogger(__name__)


@dataclass
class GroupWork:
    """The task groups that became complete at one poll, analysed together (one analyzer call): their trajectory
    keys, the extraction part and the teacher prefill requests (``requests[key] = (context, response)``) with the
    future of their values, in order."""

    task_ids: tuple[str, ...]
    keys: frozenset[str]
    part: tuple[Any, Any]
    requests: dict[str, tuple[list[int], list[int]]] = field(default_factory=dict)
    future: concurrent.futures.Future | None = None
    poll: int = 0  # the replay-buffer poll of the step that started it (1, 2, ...)


class GroupPrefetch:
    """Which prompts of this step belong to which task, which task groups are complete, and their work."""

    def __init__(self) -> None:
        self.step: int | None = None
        self.task_of_uid: dict[str, str] = {}
        self.started: set[str] = set()  # task ids whose group work has been started (or given up) this step
        self.work: dict[str, GroupWork] = {}
        self.polls = 0  # replay-buffer polls seen this step
        self.last_early = 0  # task groups of the last take() started before the step's final poll

    def submitted(self, uids: Sequence[str], task_ids: Sequence[Any], step: int) -> None:
        """Prompts handed to the rollout for ``step`` (several calls per step when verl refills)."""
        if step != self.step:
            self.reset(step)
        for uid, task in zip(uids, task_ids):
            if task is not None:
                self.task_of_uid[str(uid)] = str(task)

    def reset(self, step: int | None = None) -> None:
        for work in self.work.values():
            if work.future is not None:
                work.future.cancel()
        self.step, self.task_of_uid, self.started, self.work, self.polls = step, {}, set(), {}, 0

    def ready(self, terminal_uids: Iterable[str], step: int) -> list[tuple[str, set[str]]]:
        """``(task_id, uids)`` of the task groups of ``step`` whose prompts are all terminal and not yet started
        (called once per replay-buffer poll)."""
        if step != self.step:
            return []
        self.polls += 1
        terminal = set(terminal_uids)
        uids_of: dict[str, set[str]] = {}
        for uid, task in self.task_of_uid.items():
            uids_of.setdefault(task, set()).add(uid)
        return [(task, uids) for task, uids in sorted(uids_of.items())
                if task not in self.started and uids <= terminal]

    def add(self, work: GroupWork) -> None:
        work.poll = self.polls
        for task in work.task_ids:
            self.started.add(task)
            self.work[task] = work

    def take(self, keys_by_task: dict[str, set[str]], step: int) -> list[GroupWork]:
        """The work of every task group whose trajectory keys are exactly the batch's for that task (anything
        else, e.g. a group verl evicted or refilled after it was analysed, is redone from the batch); clears the
        step's state."""
        taken: list[GroupWork] = []
        works = list({id(w): w for w in self.work.values()}.values())
        for work in works:
            batch_keys = set().union(*(keys_by_task.get(task, set()) for task in work.task_ids))
            if step == self.step and work.keys == frozenset(batch_keys):
                taken.append(work)
            elif work.future is not None:
                work.future.cancel()
        self.last_early = sum(len(w.task_ids) for w in taken if w.poll < self.polls)
        self.task_of_uid, self.started, self.work, self.polls = {}, set(), {}, 0
        return taken


def watch_replay_buffer(buffer: Any, on_poll: Callable[[Any], None]) -> Any:
    """Call ``on_poll(buffer)`` after each of the replay buffer's TransferQueue metadata syncs (every poll of
    its ``sample`` loop, in the trainer's thread, while the rollout runs in the agent loop workers)."""
    sync = buffer._sync_metadata_from_transfer_queue

    def synced() -> None:
        sync()
        on_poll(buffer)

    buffer._sync_metadata_from_transfer_queue = synced
    return buffer


def terminal_uids(buffer: Any, partition: str = "train") -> set[str]:
    """Prompt uids whose every session has ended (verl's ``finished`` and ``failure`` groups)."""
    return set(buffer.finished_keys.get(partition, ())) | set(buffer.failure_keys.get(partition, ()))


def start_groups(task_ids: Sequence[str], keys: Sequence[str], data: Any, *, lifecycle: Any, chat: Any, step: int,
                 submit: Callable[[list[list[int]], list[list[int]]], concurrent.futures.Future]) -> GroupWork:
    """Analyse complete task groups (one analyzer call) and send their teacher prefills (``submit(contexts,
    responses)``).

    ``data``: the groups' TransferQueue fields ``prompts``, ``responses``, ``response_mask``, ``extra_fields``
    (rows in ``keys`` order).
    """
    from skillduet_plugin.integrations.verl.batch import (build_trajectories, non_tensor_list,  # lazy: imports torch
                                                          skillduet_record, tensor_rows)

    prompts, responses = tensor_rows(data["prompts"]), tensor_rows(data["responses"])
    masks = tensor_rows(data["response_mask"])
    records = [skillduet_record(x) for x in non_tensor_list(data["extra_fields"])]
    trajectories = build_trajectories(list(keys), records, prompts, responses, masks, None, step=step)
    part = lifecycle.analyze([t for _, t in trajectories], step)
    plan = plan_teacher([p.tolist() for p in prompts], [r.tolist() for r in responses], trajectories, part[0],
                        lifecycle, chat)
    rows = plan.rows
    work = GroupWork(tuple(task_ids), frozenset(keys), part,
                     {keys[i]: (plan.contexts[i], plan.responses[i]) for i in rows})
    if rows:
        work.future = submit([plan.contexts[i] for i in rows], [plan.responses[i] for i in rows])
    return work


def prefetched_rows(works: Sequence[GroupWork], contexts: Sequence[Sequence[int]],
                    responses: Sequence[Sequence[int]], key_of_row: dict[int, str], rows: Sequence[int]) -> dict:
    """``{row: log-probs}`` of the batch rows whose teacher request was already sent for their group with the
    same tokens (waits for the answers). A request that failed is logged and left for the batch path."""
    values: dict[str, tuple[tuple[list[int], list[int]], Any]] = {}
    for work in works:
        if work.future is None:
            continue
        try:
            answers = work.future.result()
        except Exception as exc:  # noqa: BLE001 - the rows are requested again from the batch path
            logger.warning("skillduet: the teacher prefills of task groups %s failed (%s); requesting them again",
                           ", ".join(work.task_ids), exc)
            continue
        for key, answer in zip(work.requests, answers):
            values[key] = (work.requests[key], answer)
    out = {}
    for row in rows:
        hit = values.get(key_of_row.get(row, ""))
        if hit is not None and hit[0] == (list(contexts[row]), list(responses[row])):
            out[row] = hit[1]
    return out


def keys_by_task(trajectories: Sequence[Any]) -> dict[str, set[str]]:
    """The batch's trajectory keys (``traj_id``) of each task."""
    out: dict[str, set[str]] = {}
    for traj in trajectories:
        out.setdefault(traj.task_id, set()).add(traj.traj_id)
    return out


def extract_step(lifecycle: Any, trajectories: Sequence[Any], works: Sequence[GroupWork], step: int) -> Any:
    """The step's Local skills: the parts of ``works`` (task groups analysed during the rollout), the rest of
    ``trajectories`` analysed now, merged and recorded once; without works, one ``lifecycle.extract``."""

    if not works:
        return lifecycle.extract(list(trajectories), step)
    done = {key for work in works for key in work.keys}
    rest = [t for t in trajectories if t.traj_id not in done]
    parts = [work.part for work in works] + ([lifecycle.analyze(rest, step)] if rest else [])
    return lifecycle.record_extraction(*merge_extractions(parts), step)


def uid_of(key: str) -> str:
    """The prompt uid of a TransferQueue trajectory key ``{uid}_{session}_{index}``."""
    return key.split("_")[0]


__all__ = ["GroupPrefetch", "GroupWork", "extract_step", "keys_by_task", "prefetched_rows", "start_groups",
           "terminal_uids", "uid_of", "watch_replay_buffer"]
