"""Teacher batches for OPD and Strength scoring, run through verl's actor workers.

The rows come from the step's teacher plan (``skills.teacher_plan``: the skill-free first prompt with the Local
skill inserted, followed by the *same* response tokens the policy produced, observations included, masked
later). Rows go to ``actor_rollout_wg.compute_log_prob`` as a nested TensorDict (verl V1's layout), so the
teacher is the current actor weights (theta_old) under the longer prompt.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from tensordict import TensorDict

from skillduet_plugin.integrations.verl.batch import nested
from skillduet_plugin.integrations.verl.topk import TEACHER_TOPK_REQUEST, split_teacher_topk


def logprob_batch(contexts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], *,
                  temperature: float, pad_to_multiple: int = 1, topk: int = 0):
    """A TensorDict for ``compute_log_prob`` in verl V1's no-padding layout.

    Rows are repeated at the end until the count is a multiple of ``pad_to_multiple`` (the actor's data-parallel
    size); returns ``(tensordict, real_rows)``. ``topk > 0`` also asks for the ``topk`` most likely tokens of every
    response position (``integrations.verl.topk``: the SkillDuet loss runs as verl's logits processor).
    """

    from verl.utils import tensordict_utils as tu  # lazy: verl (imports transformers)

    if len(contexts) != len(responses) or not contexts:
        raise ValueError(f"need as many contexts as responses (got {len(contexts)} and {len(responses)}), at least 1")
    for i, ctx in enumerate(contexts):
        if not ctx:
            raise ValueError(f"contexts[{i}] is empty: every response needs a prompt")
        if not responses[i]:
            raise ValueError(f"responses[{i}] is empty")
    real = len(contexts)
    order = list(range(real)) + [real - 1] * ((-real) % max(1, pad_to_multiple))
    prompt_rows = [torch.tensor(list(contexts[i]), dtype=torch.long) for i in order]
    response_rows = [torch.tensor(list(responses[i]), dtype=torch.long) for i in order]
    input_rows = [torch.cat([p, r]) for p, r in zip(prompt_rows, response_rows)]
    ones = [torch.ones_like(r) for r in response_rows]
    td = TensorDict({
        "prompts": nested(prompt_rows),
        "responses": nested(response_rows),
        "response_mask": nested(ones),
        "loss_mask": nested(ones),  # verl V1 stores loss_mask = response_mask
        "input_ids": nested(input_rows),
        "attention_mask": nested([torch.ones_like(x) for x in input_rows]),
        "position_ids": nested([torch.arange(x.numel(), dtype=torch.long) for x in input_rows]),
    }, batch_size=len(order))
    tu.assign_non_tensor(td, calculate_entropy=False, compute_loss=False, temperature=float(temperature))
    if topk:
        tu.assign_non_tensor(td, compute_loss=True, distillation_use_topk=True, **{TEACHER_TOPK_REQUEST: int(topk)})
    return td, real


def split_response_logprobs(log_probs: torch.Tensor, contexts: Sequence[Sequence[int]],
                            responses: Sequence[Sequence[int]]) -> list[torch.Tensor]:
    """Per row, the log-probs of the response tokens from the engine's nested full-sequence output.

    Position ``j`` of a sequence holds log p(token ``j+1``), so response token ``k`` sits at
    ``len(context) + k - 1``.
    """
    rows = list(log_probs.unbind()) if log_probs.is_nested else [log_probs[i] for i in range(log_probs.shape[0])]
    out = []
    for i in range(len(contexts)):
        start = len(contexts[i]) - 1
        out.append(rows[i][start: start + len(responses[i])].float().cpu())
    return out


def compute_response_logprobs(worker_group: Any, contexts: Sequence[Sequence[int]],
                              responses: Sequence[Sequence[int]], *, temperature: float, dp_size: int,
                              max_rows: int = 512, topk: int = 0) -> list:
    """log p(response | context) per row with the actor's current weights, in chunks of ``max_rows``.

    ``topk > 0``: per row ``(log_probs, topk_ids, topk_log_probs)``, the last two ``(response_len, topk)``: the
    same forward's most likely tokens at each response position (``integrations.verl.topk``)."""
    out: list = []
    for start in range(0, len(contexts), max_rows):
        ctx, resp = contexts[start: start + max_rows], responses[start: start + max_rows]
        td, real = logprob_batch(ctx, resp, temperature=temperature, pad_to_multiple=dp_size, topk=topk)
        output = worker_group.compute_log_prob(td)
        if hasattr(output, "get") and not isinstance(output, torch.Tensor) and not hasattr(output, "keys"):
            output = output.get()  # a DataProtoFuture from a non-blocking call
        rows = split_response_logprobs(output["log_probs"], ctx, resp)[:real]
        if topk:
            top = split_teacher_topk(output, ctx, resp, topk)[:real]
            out.extend((row, ids, logps) for row, (ids, logps) in zip(rows, top))
        else:
            out.extend(rows)
    return out


__all__ = ["compute_response_logprobs", "logprob_batch", "split_response_logprobs"]
