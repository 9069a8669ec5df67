"""The OPD teacher pass on TRL: log p(completion | teacher prompt) of every row that has a Local skill.

Two ways to compute the same numbers:

- ``lean_teacher_logps`` (the default): ``core.logprobs.response_logprobs`` over the unpadded rows. Rows are
  right-padded into ``logprob_token_budget`` chunks, so no attention mask is needed and the attention stays on its
  fused causal path; the LM head runs at completion positions only; a row stops at its last supervised position.
  It applies TRL's temperature, autocast and ``cast_lm_head_to_fp32`` as TRL does for the student log-probs the
  OPD loss compares with. Equal to TRL's pass within 1e-5 in float32 on CPU (``tests/trl/test_trl_teacher_pass.py``);
  in bf16 on a GPU the two are different kernels over differently padded rows and agree to bf16 rounding only.
- ``trl_teacher_logps``: TRL's own left-padded, attention-masked log-prob pass through the wrapped model (used when
  the weights are sharded, FSDP or ZeRO-3, where only the wrapper sees them whole).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from trl.models.utils import disable_gradient_checkpointing

from skillduet_plugin.core.logprobs import response_logprobs


def unpadded_rows(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, completion_ids: torch.Tensor,
                  completion_mask: torch.Tensor, idx: torch.Tensor,
                  needed: torch.Tensor | None = None) -> tuple[list[list[int]], list[list[int]]]:
    """``(contexts, responses)`` of the rows ``idx``: left-padded prompts without their padding, right-padded
    completions cut at their length, or earlier at their last ``needed`` position when ``needed`` is given."""
    lengths = completion_mask[idx].sum(dim=1)  # right-padded completions: the mask is a prefix
    if needed is not None:
        cols = torch.arange(1, needed.shape[1] + 1, device=needed.device)
        lengths = torch.minimum(lengths, ((needed[idx] > 0) * cols).amax(dim=1).to(lengths.device))
    p_ids, p_mask = prompt_ids[idx].tolist(), prompt_mask[idx].bool().tolist()
    contexts = [[t for t, m in zip(ids, keep) if m] for ids, keep in zip(p_ids, p_mask)]
    responses = [ids[:n] for ids, n in zip(completion_ids[idx].tolist(), lengths.tolist())]
    return contexts, responses


def lean_teacher_logps(trainer: Any, model: Any, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                       completion_ids: torch.Tensor, completion_mask: torch.Tensor, idx: torch.Tensor,
                       needed: torch.Tensor | None = None) -> torch.Tensor:
    """``(batch, completion_len)`` float32 teacher log-probs of the rows ``idx``; other rows, and positions after a
    row's last ``needed`` one, stay 0."""

    out = torch.zeros(completion_ids.shape, dtype=torch.float32, device=completion_ids.device)
    if idx.numel() == 0:
        return out
    args = trainer.args
    policy = trainer.accelerator.unwrap_model(model)
    contexts, responses = unpadded_rows(prompt_ids, prompt_mask, completion_ids, completion_mask, idx, needed)
    with torch.no_grad(), trainer.accelerator.autocast(), \
            disable_gradient_checkpointing(policy, args.gradient_checkpointing_kwargs):
        values = response_logprobs(policy, contexts, responses, token_budget=args.logprob_token_budget,
                                   pad_token_id=trainer.chat.pad_token_id, temperature=args.temperature,
                                   head_fp32=bool(getattr(args, "cast_lm_head_to_fp32", False)))
    for i, v in zip(idx.tolist(), values):
        out[i, :v.shape[0]] = v.float()
    return out


def trl_teacher_logps(trainer: Any, model: Any, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                      completion_ids: torch.Tensor, completion_mask: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """The same through TRL's ``_get_per_token_logps_and_entropies`` on the (wrapped) ``model``."""

    out = torch.zeros(completion_ids.shape, dtype=torch.float32, device=completion_ids.device)
    if idx.numel() == 0:
        return out
    args = trainer.args
    keep = int(prompt_mask[idx].sum(dim=1).max())  # drop the columns of left padding no selected row needs
    ids = torch.cat([prompt_ids[idx, -keep:], completion_ids[idx]], dim=1)
    attn = torch.cat([prompt_mask[idx, -keep:], completion_mask[idx]], dim=1)
    batch_size = args.per_device_train_batch_size if trainer.model.training else args.per_device_eval_batch_size
    with torch.no_grad(), disable_gradient_checkpointing(trainer.model, args.gradient_checkpointing_kwargs):
        logps, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, attn, completion_ids.size(1),
                                                                 batch_size=batch_size)
    out[idx] = logps.float()
    return out


def left_pad(rows: Sequence[Sequence[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Token rows left-padded into ``(ids, mask)`` (TRL's prompt layout)."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            ids[i, width - len(r):] = torch.tensor(list(r), dtype=torch.long)
            mask[i, width - len(r):] = 1
    return ids.to(device), mask.to(device)


__all__ = ["lean_teacher_logps", "left_pad", "trl_teacher_logps", "unpadded_rows"]
