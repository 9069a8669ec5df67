"""Lockstep multi-turn episode collection for a batch of tasks, with no trainer framework involved.

All episodes of a batch advance together through the episode engine (``rollout.engine``): one batched generation
(or, in choose mode, one choice among the admissible actions, see ``rollout.choice``) per turn for the episodes
still running, one batched environment step, then each episode's state appends the environment's reply as masked
tokens. The TRL trainer and the evaluation play through here. The result holds
everything both adapters and the skill lifecycle need: the skill-free first prompt (for teacher and scoring
contexts), the prompt the policy saw (with the Global), the token view with its mask, and the per-turn record.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from skillduet_plugin.config import SkillDuetConfig
from skillduet_plugin.core.conversation import ChatTokenizer
from skillduet_plugin.core.settings import declared_default
from skillduet_plugin.rollout.engine import (ACTION_SELECTIONS, Episode, EpisodeEngine, Generation, StudentFn,
                                             to_trajectory)

# generate_fn(contexts, max_new_tokens) -> one Generation per context, in order
GenerateFn = Callable[[list[list[int]], int], list[Generation]]


def hf_generate_fn(model: Any, chat: ChatTokenizer, *, temperature: float = 1.0, top_p: float = 1.0,
                   do_sample: bool = True, batch_size: int = 32, return_logps: bool = False,
                   **generate_kwargs: Any) -> GenerateFn:
    """A :data:`GenerateFn` sampling from a transformers causal LM with ``model.generate``.

    Contexts are left-padded with the tokenizer's pad id; each generation stops at eos and returns only the
    new tokens (including the eos if it was produced). With ``return_logps`` the log-probs of the sampled
    tokens under the processed (temperature-scaled, top-p filtered) distribution are returned too. Other
    ``generate`` keywords (``top_k``, ``min_p``, ``repetition_penalty``...) pass through; ``top_k`` defaults to
    0 (off) rather than transformers' 50. The caller puts the model in eval mode; this runs under ``torch.no_grad``.
    """
    import torch  # lazy: torch

    if temperature <= 0 and do_sample:
        raise ValueError(f"temperature={temperature!r} must be > 0 when sampling (or set do_sample=False)")
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} must be >= 1")
    eos, pad = chat.eos_token_id, chat.pad_token_id

    def generate(contexts: list[list[int]], max_new_tokens: int) -> list[Generation]:
        device = next(model.parameters()).device
        out: list[Generation] = []
        for start in range(0, len(contexts), batch_size):
            chunk = contexts[start:start + batch_size]
            width = max(len(c) for c in chunk)
            ids = torch.full((len(chunk), width), pad, dtype=torch.long)
            attn = torch.zeros((len(chunk), width), dtype=torch.long)
            for row, ctx in enumerate(chunk):
                ids[row, width - len(ctx):] = torch.tensor(ctx, dtype=torch.long)
                attn[row, width - len(ctx):] = 1
            kwargs: dict[str, Any] = dict(max_new_tokens=max_new_tokens, do_sample=do_sample, eos_token_id=eos,
                                          pad_token_id=pad, return_dict_in_generate=True,
                                          output_scores=return_logps)
            if do_sample:
                kwargs.update(temperature=temperature, top_p=top_p, top_k=0)
            kwargs.update(generate_kwargs)
            with torch.no_grad():
                result = model.generate(input_ids=ids.to(device), attention_mask=attn.to(device), **kwargs)
            new = result.sequences[:, width:].tolist()
            step_logps = None
            if return_logps:
                # scores[t]: (batch, vocab) processed logits that produced token t
                step_logps = torch.stack([s.float().log_softmax(-1) for s in result.scores], dim=1)
            for row, tokens in enumerate(new):
                cut = tokens.index(eos) + 1 if eos in tokens else len(tokens)
                tokens = tokens[:cut]
                logps = None
                if step_logps is not None:
                    idx = torch.tensor(tokens, dtype=torch.long, device=step_logps.device)
                    logps = step_logps[row, :cut].gather(-1, idx[:, None]).squeeze(-1).tolist()
                out.append(Generation(token_ids=tokens, logps=logps))
        return out

    return generate


def _uses_global(lifecycle: Any) -> bool:
    """False for a lifecycle configured without the Global (the Local-only ablation)."""
    return bool(getattr(getattr(lifecycle, "config", None), "use_global", True))


#: the scope of a run without a lifecycle (or a lifecycle without a config): the setting's declared default
DEFAULT_SCOPE: str = declared_default(SkillDuetConfig, "scope")


def _scope_setting(lifecycle: Any) -> str:
    """The lifecycle's ``config.scope`` (:data:`DEFAULT_SCOPE` without a lifecycle or a config)."""
    return str(getattr(getattr(lifecycle, "config", None), "scope", None) or DEFAULT_SCOPE)


def _group_indices(task_ids: Sequence[str]) -> list[int]:
    seen: dict[str, int] = {}
    result = []
    for tid in task_ids:
        result.append(seen.get(tid, 0))
        seen[tid] = seen.get(tid, 0) + 1
    return result


def lifecycle_student_fn(lifecycle: Any) -> StudentFn | None:
    """The :data:`StudentFn` of a ``SkillLifecycle``-like object (``student_messages`` and ``global_for``), or
    None when there is none or it runs without the Global."""
    if lifecycle is None or not _uses_global(lifecycle):
        return None

    def student(prompt: list[dict[str, str]], task: str, scope: str) -> tuple[list[dict[str, str]], int | None]:
        return lifecycle.student_messages(prompt, task=task, scope=scope), lifecycle.global_for(scope).version

    return student


def run_episodes(task_ids: Sequence[str], *, env_name: str, pool: Any, generate_fn: GenerateFn | None = None,
                 chat: ChatTokenizer, lifecycle: Any = None, max_turns: int, max_new_tokens: int,
                 max_total_tokens: int, max_completion_tokens: int | None = None,
                 system_prompt: str | None = None,
                 initial_messages_fn: Callable[..., list[dict[str, str]]] | None = None,
                 turn_message_fn: Callable[..., str] | None = None,
                 project_action_fn: Callable[..., tuple[str, bool]] | None = None,
                 action_selection: str, choose_fn: Callable[..., list[Generation]] | None = None,
                 action_response_fn: Callable[[str], str] | None = None,
                 student_fns: Sequence[StudentFn | None] | None = None) -> list[Episode]:
    """Play one episode per entry of ``task_ids`` (repeat a task id for a group), all in lockstep.

    Args:
        task_ids: the tasks, one episode each; repeated ids form a group (``group_index`` 0, 1, ...).
        env_name: environment name for prompts and action projection (``envs.prompts``/``envs.projection``).
        pool: an ``EnvPool``-like object: ``reset(task_ids) -> list[StepResult]`` and
            ``step(episode_ids, actions) -> list[StepResult]``, episode ids being positions in ``task_ids``.
        generate_fn: batched sampler, see :data:`GenerateFn` (used when ``action_selection="generate"``).
        chat: tokenises prompts and environment turns.
        lifecycle: a ``SkillLifecycle``; when given, episodes get the scope key of its ``config.scope`` and,
            unless its config has ``use_global=False``, the Global of that scope in the first prompt
            (``student_messages``). None: no skills, scope = the task type.
        max_turns: policy turns per episode at most.
        max_new_tokens: tokens per policy turn at most.
        max_total_tokens: prompt + completion tokens per episode at most (the model's context budget).
        max_completion_tokens: completion tokens (policy + environment) per episode at most; None = no cap
            beyond ``max_total_tokens``. A TRL run passes ``max_completion_length`` here.
        system_prompt: optional system message for ``initial_messages``.
        initial_messages_fn / turn_message_fn / project_action_fn: replace ``envs.prompts.initial_messages``,
            ``envs.prompts.turn_message`` and ``envs.projection.project_action`` (custom environments).
        action_selection: the run's ``action_selection`` setting (``core.episode.EpisodeSettings``).
            ``generate``: the policy writes each turn freely with ``generate_fn``.
            ``choose``: constrained selection among the admissible actions (the CPU demo's tiny model):
            each admissible action is written as ``action_response_fn(action)`` + eos (default
            ``rollout.choice.action_response``, exactly the warm start's format), ``choose_fn(contexts,
            candidates)`` (e.g. ``rollout.choice.hf_choice_fn``) picks one per episode, and its tokens are
            recorded as policy tokens (mask 1) exactly as a generated turn would be. Candidates longer than
            the turn's token cap are left out; an episode with none left ends ``truncated``.
        student_fns: per episode, the prompt builder that replaces the lifecycle's (None: no skill section), for
            callers that show each episode a skill of its own (``rollout.teacher_check``: a task's Local skill).

    Each episode is an :class:`~skillduet_plugin.rollout.engine.EpisodeState` (budgets, masks, stopping rules:
    see ``rollout.engine``); this function only batches the generations and the environment steps. An episode
    also ends when its worker fails (``error``).
    """
    engine = EpisodeEngine(env_name, chat, max_turns=max_turns, max_new_tokens=max_new_tokens,
                           max_total_tokens=max_total_tokens, max_completion_tokens=max_completion_tokens,
                           scope=_scope_setting(lifecycle), system_prompt=system_prompt,
                           initial_messages_fn=initial_messages_fn, turn_message_fn=turn_message_fn,
                           project_action_fn=project_action_fn, action_selection=action_selection,
                           action_response_fn=action_response_fn)
    if engine.choosing and choose_fn is None:
        raise ValueError("action_selection='choose' needs choose_fn (e.g. rollout.choice.hf_choice_fn(model, chat))")
    if not engine.choosing and generate_fn is None:
        raise ValueError("action_selection='generate' needs generate_fn (e.g. hf_generate_fn(model, chat))")
    task_ids = [str(t) for t in task_ids]
    resets = pool.reset(task_ids)
    if len(resets) != len(task_ids):
        raise RuntimeError(f"pool.reset returned {len(resets)} results for {len(task_ids)} tasks")
    if student_fns is not None and len(student_fns) != len(task_ids):
        raise ValueError(f"{len(student_fns)} student_fns for {len(task_ids)} tasks: give one per episode")
    shared = lifecycle_student_fn(lifecycle)
    builders = list(student_fns) if student_fns is not None else [shared] * len(task_ids)
    states = [engine.start(tid, res.obs, res.info, error=None if res.error is None else str(res.error),
                           group_index=g, student_fn=fn)
              for tid, res, g, fn in zip(task_ids, resets, _group_indices(task_ids), builders)]
    while True:
        pending = [(i, req) for i, req in ((i, s.next_request()) for i, s in enumerate(states)) if req is not None]
        if not pending:
            break
        active = [i for i, _ in pending]
        contexts = [req.context_ids for _, req in pending]
        if engine.choosing:
            gens = choose_fn(contexts, [req.candidates for _, req in pending])  # type: ignore[misc]
        else:
            # Each episode's own cap is applied by its state, so the batch never overshoots a budget.
            gens = generate_fn(contexts, max(req.max_new_tokens for _, req in pending))  # type: ignore[misc]
        if len(gens) != len(active):
            raise RuntimeError(f"generate_fn returned {len(gens)} generations for {len(active)} contexts")
        actions = [states[i].on_generation(gen) for i, gen in zip(active, gens)]
        results = pool.step(list(active), actions)
        if len(results) != len(active):
            raise RuntimeError(f"pool.step returned {len(results)} results for {len(active)} episodes")
        for i, res in zip(active, results):
            states[i].on_step(res.obs, res.reward, res.done, res.info,
                              error=None if res.error is None else str(res.error))
    return [s.episode for s in states]


__all__ = ["ACTION_SELECTIONS", "Episode", "GenerateFn", "Generation", "hf_generate_fn", "lifecycle_student_fn",
           "run_episodes", "to_trajectory"]
