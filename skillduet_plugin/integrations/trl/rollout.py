"""The SkillDuet rollout inside GRPOTrainer: play the batch's tasks and hand TRL the token view it trains on.

TRL calls ``rollout_func(prompts, trainer)`` with the batch's placeholder prompts; the tasks come from the
dataset rows the mixin exposes as ``trainer.batch_rows``. Episodes are sampled with HF ``generate`` on the
unwrapped policy (eval mode, no grad), or, with ``use_vllm=True, vllm_mode="colocate"``, by TRL's in-process vLLM
engine (``trainer.vllm_generation.llm``; TRL syncs the policy's weights into it before calling ``rollout_func``),
one completion per row: the whole multi-turn episode, environment tokens masked out through TRL's ``env_mask``.
vLLM's sampled-token log-probs come back as ``logprobs`` (TRL's importance-sampling correction). With
``action_selection="choose"`` each turn is instead a choice among the admissible actions
(``rollout.choice.hf_choice_fn``, on the transformers policy), recorded as the same tokens.
"""

from __future__ import annotations

from typing import Any

import torch
from trl.models.utils import unwrap_model_for_generation
from vllm import SamplingParams

from skillduet_plugin.rollout.choice import hf_choice_fn
from skillduet_plugin.rollout.collector import Episode, GenerateFn, Generation, hf_generate_fn, run_episodes


def play_batch(trainer: Any, task_ids: list[str], *, student_fns: list | None = None,
               use_vllm: bool | None = None) -> list[Episode]:
    """Run one episode per task id with the trainer's current weights. ``student_fns``: per episode, its first
    prompt's builder instead of the lifecycle's (``rollout.collector.run_episodes``); ``use_vllm=False`` samples
    with the transformers policy even in a vLLM run (torch's generator, which a caller can fork and seed)."""

    args = trainer.args
    with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator,
                                     gather_deepspeed3_params=args.ds3_gather_for_generation,
                                     gradient_checkpointing_kwargs=args.gradient_checkpointing_kwargs) as policy:
        was_training = policy.training
        policy.eval()
        try:
            extra = {k: getattr(args, k) for k in ("top_k", "min_p", "repetition_penalty")
                     if getattr(args, k, None) is not None}
            extra.update(args.generation_kwargs or {})
            if getattr(trainer, "use_vllm", False) if use_vllm is None else use_vllm:
                generate = vllm_generate_fn(trainer, temperature=args.temperature, top_p=args.top_p)
            else:
                generate = hf_generate_fn(policy, trainer.chat, temperature=args.temperature, top_p=args.top_p,
                                          batch_size=max(1, len(task_ids)), **extra)
            choose = None
            if args.action_selection == "choose":
                choose = hf_choice_fn(policy, trainer.chat, temperature=args.temperature)
            max_total = args.max_total_tokens or int(getattr(policy.config, "max_position_embeddings", 32768))
            with torch.no_grad():
                return run_episodes(
                    task_ids, env_name=args.env_name, pool=trainer.env_pool, generate_fn=generate,
                    chat=trainer.chat, lifecycle=trainer.lifecycle,
                    max_turns=args.max_turns, max_new_tokens=args.max_new_tokens_per_turn,
                    max_total_tokens=max_total, max_completion_tokens=args.max_completion_length,
                    action_selection=args.action_selection, choose_fn=choose, student_fns=student_fns,
                    **trainer.rollout_kwargs)
        finally:
            policy.train(was_training)


def vllm_generate_fn(trainer: Any, *, temperature: float, top_p: float) -> GenerateFn:
    """A :data:`GenerateFn` sampling from TRL's colocated vLLM engine: token-id prompts in, the new token ids
    (cut after the policy's eos, like ``hf_generate_fn``) and their sampled log-probs out. TRL's ``top_k``,
    ``min_p``, ``repetition_penalty`` and ``generation_kwargs`` apply as in its own vLLM generation."""
    if getattr(trainer, "vllm_mode", "colocate") != "colocate":
        raise NotImplementedError("the SkillDuet rollout drives vLLM in colocate mode only: its episodes are "
                                  "multi-turn, generated turn by turn in the trainer process (use "
                                  "vllm_mode='colocate')")

    args, llm = trainer.args, trainer.vllm_generation.llm
    eos = trainer.chat.eos_token_id
    fixed: dict[str, Any] = {"n": 1, "temperature": temperature, "top_p": top_p,
                             "top_k": -1 if args.top_k in (None, 0) else int(args.top_k),
                             "min_p": 0.0 if args.min_p is None else float(args.min_p),
                             "repetition_penalty": float(args.repetition_penalty), "logprobs": 0,
                             "stop_token_ids": [eos]}
    fixed.update(args.generation_kwargs or {})

    def generate(contexts: list[list[int]], max_new_tokens: int) -> list[Generation]:
        params = SamplingParams(max_tokens=int(max_new_tokens), **fixed)
        outputs = llm.generate([{"prompt_token_ids": list(c)} for c in contexts], params, use_tqdm=False)
        out = []
        for result in outputs:
            sample = result.outputs[0]
            ids = list(sample.token_ids)
            cut = ids.index(eos) + 1 if eos in ids else len(ids)
            logps = None
            if sample.logprobs is not None:
                logps = [float(step[tok].logprob) for step, tok in zip(sample.logprobs[:cut], ids[:cut])]
            out.append(Generation(token_ids=ids[:cut], logps=logps))
        return out

    return generate


def rollout_output(episodes: list[Episode], eos_token_id: int) -> dict[str, Any]:
    """The dict TRL expects back from ``rollout_func``: ids, ``env_mask`` and per-row extra fields
    (``env_reward``, ``invalid_actions``, ``env_won``, ``env_turns``, ``skillduet_episode``) that TRL merges into
    the batch rows and passes to reward functions as keyword arguments.

    A completion is never empty (TRL reads its last token): an episode that failed at reset gets one eos,
    masked out.
    """
    completion_ids, env_mask = [], []
    for ep in episodes:
        ids, mask = list(ep.tokens.completion_ids), list(ep.tokens.completion_mask)
        if not ids:
            ids, mask = [eos_token_id], [0]
        completion_ids.append(ids)
        env_mask.append(mask)
    return {
        "prompt_ids": [list(ep.tokens.prompt_ids) for ep in episodes],
        "completion_ids": completion_ids,
        "logprobs": _sampling_logps(episodes),
        "env_mask": env_mask,
        "env_reward": [float(ep.reward) for ep in episodes],
        "invalid_actions": [int(ep.invalid_actions) for ep in episodes],
        "env_won": [bool(ep.won) for ep in episodes],
        "env_turns": [int(ep.num_turns) for ep in episodes],
        "skillduet_episode": list(range(len(episodes))),
    }


def _sampling_logps(episodes: list[Episode]) -> list[list[float]] | None:
    """Per completion token, the log-prob the sampler gave it (0.0 on environment tokens, which TRL masks out);
    None unless every episode has them (HF sampling does not record them here)."""
    if not episodes or not all(ep.has_logps for ep in episodes):
        return None
    out = []
    for ep in episodes:
        logps = [float(x) for x in ep.tokens.completion_logps]
        out.append(logps if logps else [0.0])
    return out
