"""The warm start's loss: cross-entropy on the policy tokens of cloned expert episodes, for a batch at once
(:func:`cloning_loss`) or one episode at a time as a flat gradient (:func:`episode_gradient`, what the cloning
processes of ``warmstart.workers`` compute). Apart from ``warmstart.episodes`` so that the pool's workers import the
loss without the episode-building code, and the warm start imports the pool without a cycle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from skillduet_plugin.core.conversation import EpisodeTokens
from skillduet_plugin.core.logprobs import response_logprobs


@dataclass
class ClonedEpisode:
    """One expert episode in the RL loop's token layout (mask 1 = policy tokens, 0 = environment tokens), what the
    cloning loss reads (made by ``warmstart.episodes.layout_episode``)."""

    task_id: str
    scope: str
    tokens: EpisodeTokens
    student_messages: list[dict[str, str]]
    messages: list[dict[str, str]]
    actions: list[str]
    won: bool
    with_skill: bool


def cloning_loss(model: Any, batch: Sequence[ClonedEpisode], pad_token_id: int = 0):
    """Mean cross-entropy over the policy tokens of ``batch`` (prompt and environment tokens carry none).

    Equal to a causal LM's loss with labels on the policy tokens (-100 elsewhere), computed with ``core.logprobs.
    response_logprobs``: right-padded rows without an attention mask (the fused attention path) and the LM head
    only at completion positions, about twice as fast on CPU for the long episodes of a multi-turn game.
    """
    width = max(len(ep.tokens) for ep in batch)
    logps = response_logprobs(model, [ep.tokens.prompt_ids for ep in batch],
                              [ep.tokens.completion_ids for ep in batch], token_budget=width * len(batch),
                              pad_token_id=pad_token_id)
    count = policy_tokens(batch)
    device = logps[0].device
    total = torch.zeros((), device=device)
    for lp, ep in zip(logps, batch):
        total = total - (lp * _mask(ep).to(device=device, dtype=lp.dtype)).sum()
    return total / count


def episode_gradient(model: Any, episode: ClonedEpisode, count: int, pad_token_id: int = 0):
    """``(nll, grad)``: the summed negative log-likelihood of ``episode``'s policy tokens and the flat gradient of
    ``nll / count`` (``count``: policy tokens of the whole batch), from one unpadded forward and backward.

    Summed over a batch in batch order, the gradients are those of :func:`cloning_loss` on that batch (up to float
    rounding); computed one episode at a time, no token is padding and the sum does not depend on which process
    computed which episode.
    """
    model.zero_grad(set_to_none=True)
    nll = -(episode_logps(model, episode, pad_token_id) * _mask(episode)).sum()
    (nll / count).backward()
    grad = torch.cat([p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel())
                      for p in model.parameters()])
    model.zero_grad(set_to_none=True)
    return float(nll.detach()), grad


def episode_logps(model: Any, episode: ClonedEpisode, pad_token_id: int = 0):
    """Log-probs of one cloned episode's completion tokens (policy and environment), one unpadded row."""
    tokens = episode.tokens
    return response_logprobs(model, [tokens.prompt_ids], [tokens.completion_ids], token_budget=len(tokens),
                             pad_token_id=pad_token_id)[0]


def _mask(episode: ClonedEpisode):
    return torch.tensor(episode.tokens.completion_mask, dtype=torch.float32)


def policy_tokens(batch: Sequence[ClonedEpisode]) -> int:
    """The number of loss-bearing tokens of ``batch``; raises when there are none."""
    count = sum(int(sum(ep.tokens.completion_mask)) for ep in batch)
    if count == 0:
        raise ValueError("no policy tokens in this batch: every cloned episode needs at least one action")
    return count


__all__ = ["ClonedEpisode", "cloning_loss", "episode_gradient", "episode_logps", "policy_tokens"]
