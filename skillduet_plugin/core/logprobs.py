"""Per-token log-probs of given response tokens under given contexts, batched for a causal LM.

This is what the OPD teacher pass and Strength scoring call: ``log p(y_i | context, y_<i)`` for every response
token. Sequences are sorted by length, right-padded and chunked to a token budget; the LM head is applied only
at response positions and in row slices, so the full ``(batch, seq, vocab)`` log-softmax is never built.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

#: ``logprob_fn(contexts, responses) -> per-token log-probs of each response``: how the skill lifecycle
#: scores with the rollout weights (each adapter supplies one).
LogprobFn = Callable[[Sequence[Sequence[int]], Sequence[Sequence[int]]], list[torch.Tensor]]

_HEAD_ROWS = 2048  # response positions per LM-head slice
# Config fields with which a model's forward transforms the LM head's output (softcap, logit scaling); such
# models are scored through their full forward so the log-probs are those of the model's own logits.
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "output_multiplier", "lm_head_multiplier",
                     "logits_scaling")


def plan_chunks(lengths: Sequence[int], token_budget: int) -> list[list[int]]:
    """Group row indices into chunks whose padded size ``max_len * rows`` fits ``token_budget``.

    Rows are taken longest first, so padding inside a chunk is small. A row longer than the budget gets a
    chunk of its own.
    """
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    chunks: list[list[int]] = []
    current: list[int] = []
    current_max = 0
    for i in order:
        new_max = max(current_max, lengths[i])
        if current and new_max * (len(current) + 1) > token_budget:
            chunks.append(current)
            current, new_max = [], lengths[i]
        current.append(i)
        current_max = new_max
    if current:
        chunks.append(current)
    return chunks


def _split_model(model: torch.nn.Module):
    """(decoder, lm_head) when the model exposes them plainly, else None (use full logits)."""
    get_base = getattr(model, "get_base_model", None)
    if callable(get_base):  # a PEFT wrapper: its base model still runs with the adapters active
        model = get_base()
    config = getattr(model, "config", None)
    if config is not None and any(getattr(config, name, None) is not None for name in _LOGIT_TRANSFORMS):
        return None  # the model's own forward rescales or caps its logits: read them from there
    get_head = getattr(model, "get_output_embeddings", None)
    decoder = getattr(model, "base_model", None)
    if get_head is None or decoder is None or decoder is model:
        return None
    inner_head = getattr(decoder, "get_output_embeddings", None)
    if callable(inner_head) and inner_head() is not None:  # another LM wrapper, not a bare decoder
        return None
    head = get_head()
    if head is None or not isinstance(head, torch.nn.Linear):
        return None
    return decoder, head


def response_logprobs(model: torch.nn.Module, contexts: Sequence[Sequence[int]],
                      responses: Sequence[Sequence[int]], *, token_budget: int = 8192,
                      pad_token_id: int = 0, temperature: float = 1.0,
                      head_fp32: bool = False) -> list[torch.Tensor]:
    """Log-probs of each response's tokens given its context.

    Args:
        model: a transformers causal LM (or anything returning ``.logits`` from ``model(input_ids,
            attention_mask)``).
        contexts: token ids of each prompt (non-empty).
        responses: token ids of each response; ``responses[i]`` follows ``contexts[i]``.
        token_budget: max padded tokens per forward.
        pad_token_id: id used for right padding (masked out by the attention mask).
        temperature: log-probs are of ``logits / temperature`` (TRL scales this way).
        head_fp32: run the LM head in float32 outside autocast (TRL's ``cast_lm_head_to_fp32``).

    Returns:
        A list of float32 tensors, ``result[i]`` of shape ``(len(responses[i]),)``, on the model's device,
        in input order. Gradients flow if grad mode is on.
    """
    def sampled(logits: torch.Tensor, targets: torch.Tensor, _extra: torch.Tensor | None) -> torch.Tensor:
        return logits.gather(-1, targets[:, None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)

    return _score_positions(model, contexts, responses, sampled, token_budget=token_budget,
                            pad_token_id=pad_token_id, temperature=temperature, head_fp32=head_fp32)


def response_topk(model: torch.nn.Module, contexts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]],
                  k: int, **kwargs) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per response, the ``k`` most likely next tokens at each of its positions: ``(logps, ids)``, each
    ``(len(response), k)`` (float32, long), ``logps`` log-softmaxed over the whole vocabulary. Keywords as
    :func:`response_logprobs`."""
    if k < 1:
        raise ValueError(f"k={k!r} must be >= 1")

    def topk(logits: torch.Tensor, _targets: torch.Tensor, _extra: torch.Tensor | None) -> torch.Tensor:
        values, ids = (logits - torch.logsumexp(logits, dim=-1, keepdim=True)).topk(min(k, logits.shape[-1]), -1)
        return torch.cat([values, ids.to(values.dtype)], dim=-1)  # ids < 2**24 are exact in float32

    packed = _score_positions(model, contexts, responses, topk, **kwargs)
    return [(p[:, :p.shape[1] // 2], p[:, p.shape[1] // 2:].long()) for p in packed]


def response_logprobs_at(model: torch.nn.Module, contexts: Sequence[Sequence[int]],
                         responses: Sequence[Sequence[int]], ids: Sequence[torch.Tensor],
                         **kwargs) -> list[torch.Tensor]:
    """Per response, the log-probs of the given token ids at each of its positions: ``ids[i]`` is
    ``(len(responses[i]), k)`` and so is the result (float32; gradients flow if grad mode is on). Keywords as
    :func:`response_logprobs`."""
    if len(ids) != len(responses) or any(i.shape[0] != len(r) for i, r in zip(ids, responses)):
        raise ValueError("ids needs one (len(response), k) tensor per response")

    def at(logits: torch.Tensor, _targets: torch.Tensor, extra: torch.Tensor | None) -> torch.Tensor:
        assert extra is not None
        return logits.gather(-1, extra) - torch.logsumexp(logits, dim=-1, keepdim=True)

    return _score_positions(model, contexts, responses, at, extra=list(ids), **kwargs)


def _score_positions(model: torch.nn.Module, contexts: Sequence[Sequence[int]],
                     responses: Sequence[Sequence[int]], reduce, *, extra: list[torch.Tensor] | None = None,
                     token_budget: int = 8192, pad_token_id: int = 0, temperature: float = 1.0,
                     head_fp32: bool = False) -> list[torch.Tensor]:
    """``reduce(logits, targets, extra)`` of every response position, per response in input order: ``logits``
    (positions, vocab) float32 temperature-scaled, ``targets`` the response tokens, ``extra`` the rows of the
    per-response tensors in ``extra`` at those positions."""
    if len(contexts) != len(responses):
        raise ValueError(f"{len(contexts)} contexts but {len(responses)} responses")
    for i, ctx in enumerate(contexts):
        if len(ctx) == 0:
            raise ValueError(f"contexts[{i}] is empty: a response needs at least one context token")
    if temperature <= 0:
        raise ValueError(f"temperature={temperature!r} must be > 0")
    device = next(model.parameters()).device
    lengths = [len(c) + len(r) for c, r in zip(contexts, responses)]
    results: list[torch.Tensor | None] = [None] * len(contexts)
    split = _split_model(model)
    for chunk in plan_chunks(lengths, token_budget):
        max_len = max(lengths[i] for i in chunk)
        ids = torch.full((len(chunk), max_len), pad_token_id, dtype=torch.long)
        rows, cols, targets = [], [], []
        for row, i in enumerate(chunk):
            seq = list(contexts[i]) + list(responses[i])
            ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
            start = len(contexts[i])
            for j in range(len(responses[i])):
                rows.append(row)
                cols.append(start + j - 1)  # the position whose output predicts response token j
                targets.append(responses[i][j])
        ids = ids.to(device)
        # Rows are right-padded, so causal attention already hides the padding from every position we read:
        # passing no attention mask keeps a causal LM on its fused attention path (about 2x faster on long rows)
        # and leaves the outputs at real positions unchanged (tested against one-sequence-at-a-time forwards).
        rows_t = torch.tensor(rows, dtype=torch.long, device=device)
        cols_t = torch.tensor(cols, dtype=torch.long, device=device)
        targets_t = torch.tensor(targets, dtype=torch.long, device=device)
        extra_t = torch.cat([extra[i].to(device) for i in chunk]) if extra is not None else None
        if split is not None:
            decoder, head = split
            hidden = decoder(input_ids=ids, attention_mask=None).last_hidden_state
            picked = hidden[rows_t, cols_t]
            pieces = []
            for k in range(0, picked.shape[0], _HEAD_ROWS):
                logits = _head(head, picked[k:k + _HEAD_ROWS], head_fp32) / temperature
                part = extra_t[k:k + _HEAD_ROWS] if extra_t is not None else None
                pieces.append(reduce(logits, targets_t[k:k + _HEAD_ROWS], part))
            flat = torch.cat(pieces) if pieces else torch.zeros(0, device=device)
        else:
            logits = model(input_ids=ids, attention_mask=None).logits
            flat = reduce(logits[rows_t, cols_t].float() / temperature, targets_t, extra_t)
        offset = 0
        for i in chunk:
            n = len(responses[i])
            results[i] = flat[offset: offset + n]
            offset += n
    return [r if r is not None else torch.zeros(0, device=device) for r in results]


def _head(head: torch.nn.Linear, hidden: torch.Tensor, fp32: bool) -> torch.Tensor:
    """Float32 logits of ``hidden`` rows; with ``fp32`` the projection itself runs in float32 (no autocast)."""
    if not fp32:
        return head(hidden).float()
    bias = None if head.bias is None else head.bias.float()
    with torch.autocast(hidden.device.type, enabled=False):
        return torch.nn.functional.linear(hidden.float(), head.weight.float(), bias)


def pad_logprobs(values: Sequence[torch.Tensor], length: int | None = None,
                 pad_value: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad per-sequence log-prob vectors into ``(batch, length)`` plus a ``(batch, length)`` mask."""
    length = max((v.shape[0] for v in values), default=0) if length is None else length
    device = values[0].device if values else torch.device("cpu")
    out = torch.full((len(values), length), pad_value, dtype=torch.float32, device=device)
    mask = torch.zeros((len(values), length), dtype=torch.float32, device=device)
    for i, v in enumerate(values):
        n = min(v.shape[0], length)
        out[i, :n] = v[:n].float()
        mask[i, :n] = 1.0
    return out, mask
