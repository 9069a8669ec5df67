"""Constrained action selection: the policy picks one of the admissible actions by scoring each one's response.

Instead of generating a turn freely, every admissible action is written as the response the policy is taught to
give (:func:`action_response`: ``<think>reason</think><action>A</action>`` + eos), each response's total
log-prob under the policy is computed given the episode so far, and one is drawn with probability
``softmax(sum_logp / temperature)`` (the argmax when greedy). The chosen response's tokens are then recorded
like generated ones, with a loss mask of its decisive tokens only (``rollout.engine.decisive_mask``: the tokens
every remaining candidate shares, such as ``go to`` or ``</action>``, say nothing about the choice).
The CPU demo uses this so that a tiny model, which cannot copy long action strings reliably, still plays real
games; real runs generate freely.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

from skillduet_plugin.core.conversation import ChatTokenizer
from skillduet_plugin.rollout.engine import Generation
from skillduet_plugin.rollout.responses import action_response  # noqa: F401 - re-exported, part of this API

# choose_fn(contexts, candidates) -> the chosen candidate per context, in order (token ids of one candidate each)
ChooseFn = Callable[[list[list[int]], list[list[list[int]]]], list[Generation]]


def candidate_logprobs(model: Any, context: list[int], candidates: list[list[int]], *,
                       candidate_batch: int = 64) -> list[float]:
    """Sum of ``log p(token | context, earlier tokens)`` over each candidate's tokens (temperature 1).

    The context is run once; its KV cache is then repeated over a chunk of candidates, which are right-padded
    (causal attention keeps padding out of every position that is read), so the cost is one context forward
    plus ``sum(len(candidates))`` tokens.
    """
    import torch  # lazy: torch

    if not context:
        raise ValueError("context is empty: a candidate needs at least one context token")
    if any(len(c) == 0 for c in candidates):
        raise ValueError("a candidate has no tokens: every candidate response needs at least one token")
    device = next(model.parameters()).device
    out = model(input_ids=torch.tensor([context], dtype=torch.long, device=device), use_cache=True)
    first = out.logits[0, -1].float().log_softmax(-1)  # (vocab,) predicts every candidate's first token
    cache = out.past_key_values
    scores: list[float] = []
    for start in range(0, len(candidates), candidate_batch):
        chunk = candidates[start:start + candidate_batch]
        width = max(len(c) for c in chunk)
        totals = first[torch.tensor([c[0] for c in chunk], device=device)]
        if width > 1:
            ids = torch.zeros((len(chunk), width - 1), dtype=torch.long)
            for row, cand in enumerate(chunk):
                ids[row, :len(cand) - 1] = torch.tensor(cand[:-1], dtype=torch.long)
            past = copy.deepcopy(cache)
            past.batch_repeat_interleave(len(chunk))
            attn = torch.ones((len(chunk), len(context) + width - 1), dtype=torch.long, device=device)
            logits = model(input_ids=ids.to(device), attention_mask=attn, past_key_values=past,
                           use_cache=True).logits.float().log_softmax(-1)  # (chunk, width - 1, vocab)
            targets = torch.zeros((len(chunk), width - 1), dtype=torch.long)
            keep = torch.zeros((len(chunk), width - 1))
            for row, cand in enumerate(chunk):
                targets[row, :len(cand) - 1] = torch.tensor(cand[1:], dtype=torch.long)
                keep[row, :len(cand) - 1] = 1.0
            picked = logits.gather(-1, targets.to(device)[..., None]).squeeze(-1)
            totals = totals + (picked * keep.to(device)).sum(-1)
        scores.extend(totals.tolist())
    return scores


def turn_candidate_logprobs(model: Any, sequence: list[int], turns: list[tuple[int, list[list[int]]]], *,
                            candidate_batch: int = 64) -> list[Any]:
    """Per turn ``(start, candidates)`` of one episode, ``sum log p(candidate tokens | sequence[:start])`` of each
    candidate (temperature 1), as a float32 tensor ``(len(candidates),)``; gradients flow when grad mode is on.

    ``sequence`` is the whole episode (prompt + completion) and ``start`` the position where a turn's response
    begins, so one forward over the sequence serves every turn: a turn's first candidate token is read from the
    output at ``start - 1``, and the rest of each candidate continues from the keys and values of the first
    ``start`` positions (the same numbers :func:`candidate_logprobs` computes one context at a time).
    """
    import torch  # lazy: torch
    from transformers import DynamicCache  # lazy: transformers

    if not turns:
        return []
    end = max(start for start, _ in turns)
    if not 0 < end <= len(sequence):
        raise ValueError(f"turn starts must lie in 1..{len(sequence)} (the sequence's length), got {end}")
    device = next(model.parameters()).device
    out = model(input_ids=torch.tensor([sequence[:end]], dtype=torch.long, device=device), use_cache=True)
    logps = out.logits[0].float().log_softmax(-1)  # (end, vocab)
    layers = [(layer.keys, layer.values) for layer in out.past_key_values.layers]
    result = []
    for start, candidates in turns:
        if not candidates or any(len(c) == 0 for c in candidates):
            raise ValueError("every turn needs at least one candidate, each with at least one token")
        totals = []
        for first in range(0, len(candidates), candidate_batch):
            chunk = candidates[first:first + candidate_batch]
            head = logps[start - 1, torch.tensor([c[0] for c in chunk], device=device)]
            width = max(len(c) for c in chunk)
            if width > 1:
                ids = torch.zeros((len(chunk), width - 1), dtype=torch.long)
                targets = torch.zeros((len(chunk), width - 1), dtype=torch.long)
                keep = torch.zeros((len(chunk), width - 1))
                for row, cand in enumerate(chunk):
                    ids[row, :len(cand) - 1] = torch.tensor(cand[:-1], dtype=torch.long)
                    targets[row, :len(cand) - 1] = torch.tensor(cand[1:], dtype=torch.long)
                    keep[row, :len(cand) - 1] = 1.0
                past = DynamicCache([(k[:, :, :start].expand(len(chunk), -1, -1, -1),
                                      v[:, :, :start].expand(len(chunk), -1, -1, -1)) for k, v in layers])
                attn = torch.ones((len(chunk), start + width - 1), dtype=torch.long, device=device)
                rest = model(input_ids=ids.to(device), attention_mask=attn, past_key_values=past,
                             use_cache=True).logits.float().log_softmax(-1)
                picked = rest.gather(-1, targets.to(device)[..., None]).squeeze(-1)
                head = head + (picked * keep.to(device)).sum(-1)
            totals.append(head)
        result.append(torch.cat(totals))
    return result


def hf_choice_fn(model: Any, chat: ChatTokenizer, *, temperature: float = 1.0, do_sample: bool = True,
                 candidate_batch: int = 64) -> ChooseFn:
    """A :data:`ChooseFn` over a transformers causal LM: per context, draw one candidate with probability
    ``softmax(sum_logp / temperature)`` (``do_sample=False``: the highest-scoring one, first on ties).

    Sampling uses torch's global generator (seed it for reproducible draws). The caller puts the model in eval
    mode; this runs under ``torch.no_grad``. ``chat`` is accepted for symmetry with ``hf_generate_fn``.
    """
    import torch  # lazy: torch

    if do_sample and temperature <= 0:
        raise ValueError(f"temperature={temperature!r} must be > 0 when sampling (or set do_sample=False)")
    if candidate_batch < 1:
        raise ValueError(f"candidate_batch={candidate_batch!r} must be >= 1")
    del chat

    def choose(contexts: list[list[int]], candidates: list[list[list[int]]]) -> list[Generation]:
        if len(contexts) != len(candidates):
            raise ValueError(f"{len(contexts)} contexts but {len(candidates)} candidate lists")
        chosen: list[Generation] = []
        with torch.no_grad():
            for ctx, cands in zip(contexts, candidates):
                if not cands:
                    raise ValueError("a context has no candidates: choose mode needs at least one admissible action")
                scores = torch.tensor(candidate_logprobs(model, ctx, cands, candidate_batch=candidate_batch))
                if do_sample:
                    k = int(torch.multinomial((scores / temperature).softmax(-1), 1))
                else:
                    k = int(scores.argmax())
                chosen.append(Generation(token_ids=list(cands[k])))
        return chosen

    return choose


__all__ = ["ChooseFn", "action_response", "candidate_logprobs", "hf_choice_fn", "turn_candidate_logprobs"]
