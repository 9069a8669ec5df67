"""``skillduet.opd_estimator=topk`` on verl: Eq. 1's term in expectation over the teacher's top-k tokens.

Both halves ride on verl 0.9's logits-processor hook, the one its own top-k distillation (``forward_kl_topk``) uses:
when a micro-batch carries the non-tensor flag ``distillation_use_topk``, the FSDP engine calls the loss function
with ``student_logits`` (``(1, total_tokens, vocab)``, already divided by the temperature) before the loss call, and
keeps every ``(1, total_tokens)`` tensor it returns in ``model_output``. No second forward is needed:

- *teacher pass* (the skill-augmented rows through ``compute_log_prob``, flag :data:`TEACHER_TOPK_REQUEST` = k): the
  processor returns the teacher's k most likely token ids and their log-probs at every response position, one
  ``(1, total_tokens)`` tensor per rank (:func:`teacher_topk_outputs`), which :func:`split_teacher_topk` cuts back
  into per-row ``(response_len, k)`` tensors;
- *actor update*: the processor gathers the student's log-probs at those ids from the same logits that give the
  sampled tokens' log-probs and returns ``core.opd.opd_expected``'s per-position term (:func:`student_topk_outputs`),
  which the engine loss aggregates exactly like the sampled per-token term.

Position ``j`` of a packed sequence predicts token ``j + 1``, so response token ``t`` of a row with a ``P``-token
prompt is predicted at ``P + t - 1`` (as in ``verl.workers.utils.padding.no_padding_2_padding``). The trainer stores
the teacher's ids and log-probs flattened per row (``response_len * k`` values, TransferQueue's 1-D rows).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from skillduet_plugin.core.opd import expected_stats, opd_expected

#: flattened ``(response_len * k)`` per row: the teacher's top-k token ids at each response position
TEACHER_TOPK_IDS_KEY = "skillduet_teacher_topk_ids"
#: flattened ``(response_len * k)`` per row: the teacher's log-probs of those ids
TEACHER_TOPK_LOGPROBS_KEY = "skillduet_teacher_topk_log_probs"
#: non-tensor flag of a teacher request: return the top-k (this many) of every response position
TEACHER_TOPK_REQUEST = "skillduet_teacher_topk"
#: model_output key (full sequence): Eq. 1's expected per-position term, at the position predicting each response token
TOPK_TERM_KEY = "skillduet_opd_topk"
#: non-tensor field the processor leaves on the micro-batch: the gate statistics of its positions
TOPK_STATS_KEY = "skillduet_opd_topk_stats"


def _lengths(data: Any) -> tuple[list[int], list[int]]:
    prompts, responses = data["prompts"], data["responses"]
    if not (prompts.is_nested and responses.is_nested):
        raise ValueError("skillduet.opd_estimator=topk needs verl's no-padding batch layout (nested prompts and "
                         "responses, verl V1's default)")
    return prompts.offsets().diff().tolist(), responses.offsets().diff().tolist()


def response_positions(data: Any) -> tuple[torch.Tensor, list[int]]:
    """``(index, response_lens)``: for every response token of the micro-batch, in row order, the packed position
    whose logits predict it."""
    prompt_lens, response_lens = _lengths(data)
    index, start = [], 0
    for p, r in zip(prompt_lens, response_lens):
        if p < 1:
            raise ValueError("every row needs a prompt token before its response")
        index.append(torch.arange(start + p - 1, start + p - 1 + r))
        start += p + r
    return (torch.cat(index) if index else torch.zeros(0, dtype=torch.long)), response_lens


def _check_single_shard(logits: torch.Tensor, index: torch.Tensor) -> None:
    from verl.utils.ulysses import get_ulysses_sequence_parallel_world_size  # lazy: verl (imports transformers)

    if get_ulysses_sequence_parallel_world_size() > 1:
        raise ValueError("skillduet.opd_estimator=topk does not support Ulysses sequence parallelism: set "
                         "actor_rollout_ref.actor.ulysses_sequence_parallel_size=1 or skillduet.opd_estimator=sampled")
    if index.numel() and int(index.max()) >= logits.shape[1]:
        raise ValueError(f"the logits hold {logits.shape[1]} positions but the batch's responses need "
                         f"{int(index.max()) + 1}")


def _scatter(values: torch.Tensor, index: torch.Tensor, total: int) -> torch.Tensor:
    """``(1, total)`` zeros with ``values`` at ``index`` (differentiable in ``values``)."""
    out = values.new_zeros(total)
    return out.index_put((index.to(values.device),), values).unsqueeze(0)


def teacher_topk_outputs(student_logits: torch.Tensor, data: Any, k: int) -> dict[str, torch.Tensor]:
    """The teacher pass's processor: ids and log-probs of the ``k`` most likely tokens at every response position,
    as ``2k`` tensors ``(1, total_tokens)`` (``ids_<j>``, ``logps_<j>``; 0 outside the responses)."""
    index, _ = response_positions(data)
    _check_single_shard(student_logits, index)
    with torch.no_grad():
        logps = torch.log_softmax(student_logits[0, index.to(student_logits.device)].float(), dim=-1)
        top = torch.topk(logps, k=min(k, logps.shape[-1]), dim=-1)
    total = student_logits.shape[1]
    out = {}
    for j in range(top.indices.shape[-1]):
        out[f"{TEACHER_TOPK_REQUEST}_ids_{j}"] = _scatter(top.indices[:, j].to(torch.float32), index, total)
        out[f"{TEACHER_TOPK_REQUEST}_logps_{j}"] = _scatter(top.values[:, j], index, total)
    return out


def split_teacher_topk(output: Any, contexts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]],
                       k: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per row, ``(ids, logps)`` of shape ``(response_len, k)`` from ``compute_log_prob``'s output of a teacher
    request (the rows' nested full-sequence tensors)."""
    columns = []
    for kind in ("ids", "logps"):
        keys = [f"{TEACHER_TOPK_REQUEST}_{kind}_{j}" for j in range(k)]
        missing = [key for key in keys if key not in output.keys()]
        if missing:
            raise KeyError(f"the teacher pass returned no {missing[0]}: the actor's loss function is not the "
                           "SkillDuet engine loss (skillduet_sync installs it)")
        columns.append([list(output[key].unbind()) for key in keys])
    rows = []
    for i, (ctx, resp) in enumerate(zip(contexts, responses)):
        start, n = len(ctx) - 1, len(resp)
        ids = torch.stack([col[i][start:start + n] for col in columns[0]], dim=-1).round().long()
        logps = torch.stack([col[i][start:start + n] for col in columns[1]], dim=-1).float()
        rows.append((ids.cpu(), logps.cpu()))
    return rows


def flat_rows(rows: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """``(response_len, k)`` rows flattened to TransferQueue's 1-D per-token rows."""
    return [r.reshape(-1).contiguous() for r in rows]


def _teacher_rows(data: Any, response_lens: list[int], k: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = data[TEACHER_TOPK_IDS_KEY]
    logps = data[TEACHER_TOPK_LOGPROBS_KEY]
    id_rows = list(ids.unbind()) if ids.is_nested else [ids[i] for i in range(ids.shape[0])]
    lp_rows = list(logps.unbind()) if logps.is_nested else [logps[i] for i in range(logps.shape[0])]
    out_ids, out_lps = [], []
    for r, a, b in zip(response_lens, id_rows, lp_rows):
        if a.numel() < r * k:
            raise ValueError(f"teacher top-k row of {a.numel()} values for {r} response tokens x k={k}")
        out_ids.append(a[: r * k].reshape(r, k))
        out_lps.append(b[: r * k].reshape(r, k))
    empty = torch.zeros(0, k)
    return (torch.cat(out_ids).long() if out_ids else empty.long()), (torch.cat(out_lps) if out_lps else empty)


def student_topk_outputs(student_logits: torch.Tensor, data: Any, *, beta: float, k: int,
                         weights: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """The actor update's processor: the student's log-probs at the teacher's top-k ids and
    ``core.opd.opd_expected``'s per-position term, ``(1, total_tokens)`` with grad, at the position predicting each
    response token. ``weights`` (``(n_response_tokens,)``, row order) selects the positions whose gate statistics
    are left on ``data`` (:data:`TOPK_STATS_KEY`)."""
    index, response_lens = response_positions(data)
    _check_single_shard(student_logits, index)
    device = student_logits.device
    ids, teacher = _teacher_rows(data, response_lens, k)
    logits = student_logits[0, index.to(device)].float()
    student = torch.log_softmax(logits, dim=-1).gather(-1, ids.to(device))
    valid = torch.isfinite(teacher).to(device)
    per_position, _ = opd_expected(student, teacher.to(device), beta=beta, valid=valid)
    if weights is not None:
        stats = expected_stats(student, teacher.to(device), (weights.to(device) > 0).float(), beta=beta, valid=valid)
        from verl.utils import tensordict_utils as tu  # lazy: verl (imports transformers)

        tu.assign_non_tensor(data, **{TOPK_STATS_KEY: stats})
    return {TOPK_TERM_KEY: _scatter(per_position, index, student_logits.shape[1])}


__all__ = ["TEACHER_TOPK_IDS_KEY", "TEACHER_TOPK_LOGPROBS_KEY", "TEACHER_TOPK_REQUEST", "TOPK_STATS_KEY",
           "TOPK_TERM_KEY", "flat_rows", "response_positions", "split_teacher_topk", "student_topk_outputs",
           "teacher_topk_outputs"]
