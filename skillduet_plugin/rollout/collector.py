"""Lockstep multi-turn episode collection for a batch of tasks, with no trainer framework involved.

All episodes of a batch advance together: one batched generation (or, in choose mode, one choice among the
admissible actions, see ``rollout.choice``) per turn for the episodes still running, one batched environment
step, then the environment's reply is appended as masked tokens. The result holds
everything both adapters and the skill lifecycle need: the skill-free first prompt (for teacher and scoring
contexts), the prompt the policy saw (with the Global), the token view with its mask, and the per-turn record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from skillduet_plugin.rollout.conversation import ChatTokenizer, EpisodeTokens
from skillduet_plugin.skills.types import Trajectory


@dataclass
class Generation:
    """One sampled continuation: the new token ids (ending in eos if the model produced it) and, if the
    generator computed them, the sampling log-probs of those tokens."""

    token_ids: list[int]
    logps: list[float] | None = None


# generate_fn(contexts, max_new_tokens) -> one Generation per context, in order
GenerateFn = Callable[[list[list[int]], int], list[Generation]]


@dataclass
class Episode:
    """One finished episode of the policy in a text environment.

    ``prompt_messages`` is the first prompt without any skill text; ``student_messages`` is what the policy
    actually saw (with the Global when a lifecycle was given); ``messages`` is the whole conversation from
    the student's view. ``observations[0]`` is the first observation and ``observations[i + 1]`` the one the
    environment returned for ``actions[i]``. ``valid[i]`` says whether ``actions[i]`` was parsed as an
    admissible action. ``reward`` is the sum of the environment's step rewards.
    """

    task_id: str
    scope: str
    task: str
    group_index: int
    prompt_messages: list[dict[str, str]]
    student_messages: list[dict[str, str]]
    messages: list[dict[str, str]]
    tokens: EpisodeTokens
    actions: list[str] = field(default_factory=list)
    responses: list[str] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)
    valid: list[bool] = field(default_factory=list)
    reward: float = 0.0
    won: bool = False
    score: float = 0.0
    num_turns: int = 0
    truncated: bool = False
    error: str | None = None
    global_version: int | None = None
    env_name: str = ""
    has_logps: bool = False

    @property
    def invalid_actions(self) -> int:
        """Number of turns whose response did not parse to an admissible action."""
        return sum(1 for ok in self.valid if not ok)


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
    import torch

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


def _group_indices(task_ids: Sequence[str]) -> list[int]:
    seen: dict[str, int] = {}
    result = []
    for tid in task_ids:
        result.append(seen.get(tid, 0))
        seen[tid] = seen.get(tid, 0) + 1
    return result


ACTION_SELECTIONS = ("generate", "choose")


def run_episodes(task_ids: Sequence[str], *, env_name: str, pool: Any, generate_fn: GenerateFn | None = None,
                 chat: ChatTokenizer, lifecycle: Any = None, max_turns: int, max_new_tokens: int,
                 max_total_tokens: int, max_completion_tokens: int | None = None,
                 system_prompt: str | None = None,
                 initial_messages_fn: Callable[..., list[dict[str, str]]] | None = None,
                 turn_message_fn: Callable[..., str] | None = None,
                 project_action_fn: Callable[..., tuple[str, bool]] | None = None,
                 action_selection: str = "generate", choose_fn: Callable[..., list[Generation]] | None = None,
                 action_response_fn: Callable[[str], str] | None = None) -> list[Episode]:
    """Play one episode per entry of ``task_ids`` (repeat a task id for a group), all in lockstep.

    Args:
        task_ids: the tasks, one episode each; repeated ids form a group (``group_index`` 0, 1, ...).
        env_name: environment name for prompts and action projection (``envs.prompts``/``envs.projection``).
        pool: an ``EnvPool``-like object: ``reset(task_ids) -> list[StepResult]`` and
            ``step(episode_ids, actions) -> list[StepResult]``, episode ids being positions in ``task_ids``.
        generate_fn: batched sampler, see :data:`GenerateFn` (used when ``action_selection="generate"``).
        chat: tokenises prompts and environment turns.
        lifecycle: a ``SkillLifecycle``; when given, episodes get its scope key (``lifecycle.scope_for``) and,
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
        action_selection: ``generate`` (default): the policy writes each turn freely with ``generate_fn``.
            ``choose``: constrained selection among the admissible actions (the CPU demo's tiny model):
            each admissible action is written as ``action_response_fn(action)`` + eos (default
            ``rollout.choice.action_response``, exactly the warm start's format), ``choose_fn(contexts,
            candidates)`` (e.g. ``rollout.choice.hf_choice_fn``) picks one per episode, and its tokens are
            recorded as policy tokens (mask 1) exactly as a generated turn would be. Candidates longer than
            the turn's token cap are left out; an episode with none left ends ``truncated``.

    An episode ends when the environment says done, after ``max_turns`` turns, when the next turn no longer
    fits the token budget (``truncated``), or when its worker fails (``error``). A policy turn cut by
    ``max_new_tokens`` gets an eos appended with mask 0, so every assistant turn is closed in the sequence.
    """
    if max_turns < 1:
        raise ValueError(f"max_turns={max_turns!r} must be >= 1")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens!r} must be >= 1")
    if action_selection not in ACTION_SELECTIONS:
        raise ValueError(f"action_selection={action_selection!r} is invalid: allowed values are "
                         f"{', '.join(ACTION_SELECTIONS)}")
    choosing = action_selection == "choose"
    if choosing and choose_fn is None:
        raise ValueError("action_selection='choose' needs choose_fn (e.g. rollout.choice.hf_choice_fn(model, chat))")
    if not choosing and generate_fn is None:
        raise ValueError("action_selection='generate' needs generate_fn (e.g. hf_generate_fn(model, chat))")
    if choosing and action_response_fn is None:
        from skillduet_plugin.rollout.choice import action_response as action_response_fn
    if initial_messages_fn is None or turn_message_fn is None:
        from skillduet_plugin.envs import prompts as _prompts

        initial_messages_fn = initial_messages_fn or _prompts.initial_messages
        turn_message_fn = turn_message_fn or _prompts.turn_message
    if project_action_fn is None:
        from skillduet_plugin.envs.projection import project_action as project_action_fn

    task_ids = [str(t) for t in task_ids]
    groups = _group_indices(task_ids)
    resets = pool.reset(task_ids)
    if len(resets) != len(task_ids):
        raise RuntimeError(f"pool.reset returned {len(resets)} results for {len(task_ids)} tasks")

    episodes: list[Episode] = []
    admissible: list[list[str]] = []
    for i, (tid, res) in enumerate(zip(task_ids, resets)):
        info = dict(res.info or {})
        task = str(info.get("task", ""))
        scope = str(info.get("task_type", "unknown"))
        if lifecycle is not None and hasattr(lifecycle, "scope_for"):
            scope = lifecycle.scope_for(task_type=scope, task_id=tid)  # config.scope: task type, task or single
        adm = list(info.get("admissible_actions") or [])
        obs = "" if res.obs is None else str(res.obs)
        prompt_messages = initial_messages_fn(env_name, task=task, observation=obs, admissible_actions=adm,
                                              system_prompt=system_prompt)
        student = prompt_messages
        version = None
        if lifecycle is not None and res.error is None and _uses_global(lifecycle):
            student = lifecycle.student_messages(prompt_messages, task=task, scope=scope)
            version = lifecycle.global_for(scope).version
        tokens = EpisodeTokens(prompt_ids=chat.prompt_ids(student))
        ep = Episode(task_id=tid, scope=scope, task=task, group_index=groups[i],
                     prompt_messages=[dict(m) for m in prompt_messages],
                     student_messages=[dict(m) for m in student], messages=[dict(m) for m in student],
                     tokens=tokens, observations=[obs], global_version=version, env_name=env_name)
        if res.error is not None:
            ep.error = str(res.error)
        episodes.append(ep)
        admissible.append(adm)

    def budget_left(ep: Episode) -> int:
        left = max_total_tokens - len(ep.tokens)
        if max_completion_tokens is not None:
            left = min(left, max_completion_tokens - len(ep.tokens.completion_ids))
        return left

    active = [i for i, ep in enumerate(episodes) if ep.error is None]
    for i in list(active):
        if budget_left(episodes[i]) < 2:  # one generated token plus a closing eos
            episodes[i].truncated = True
            active.remove(i)

    while active:
        if choosing:
            # A candidate ends in its own eos, so it may use the whole remaining budget.
            caps = {i: min(max_new_tokens, budget_left(episodes[i])) for i in active}
            candidates = _candidates(active, admissible, caps, chat, action_response_fn, env_name)
            for i in [i for i in active if not candidates[i]]:
                episodes[i].truncated = True
            active = [i for i in active if candidates[i]]
            if not active:
                break
            gens = choose_fn([episodes[i].tokens.context_ids for i in active], [candidates[i] for i in active])
        else:
            # Each episode gets its own cap so the whole batch never overshoots its budget.
            caps = {i: min(max_new_tokens, budget_left(episodes[i]) - 1) for i in active}
            width = max(caps.values())
            gens = generate_fn([episodes[i].tokens.context_ids for i in active], width)
        if len(gens) != len(active):
            raise RuntimeError(f"generate_fn returned {len(gens)} generations for {len(active)} contexts")
        actions: list[str] = []
        for i, gen in zip(active, gens):
            ep = episodes[i]
            ids = list(gen.token_ids)[:caps[i]]
            logps = list(gen.logps)[:caps[i]] if gen.logps is not None else None
            ep.has_logps = logps is not None
            ep.tokens.add_policy(ids, logps)
            if not ids or ids[-1] != chat.eos_token_id:
                ep.tokens.add_env([chat.eos_token_id])
            # Special tokens such as <action> may be registered as "special": drop only eos/pad, keep the rest.
            text = chat.tokenizer.decode([t for t in ids if t not in (chat.eos_token_id, chat.pad_token_id)],
                                         skip_special_tokens=False)
            action, valid = project_action_fn(env_name, text, admissible[i])
            ep.responses.append(text)
            ep.messages.append({"role": "assistant", "content": text})
            ep.actions.append(action)
            ep.valid.append(bool(valid))
            ep.num_turns += 1
            actions.append(action)
        results = pool.step(list(active), actions)
        if len(results) != len(active):
            raise RuntimeError(f"pool.step returned {len(results)} results for {len(active)} episodes")
        still: list[int] = []
        for i, res in zip(active, results):
            ep = episodes[i]
            info = dict(res.info or {})
            ep.reward += float(res.reward or 0.0)
            ep.won = bool(info.get("won", ep.won))
            ep.score = float(info.get("score", ep.score) or 0.0)
            obs = "" if res.obs is None else str(res.obs)
            ep.observations.append(obs)
            if res.error is not None:
                ep.error = str(res.error)
                continue
            if res.done:
                continue
            if ep.num_turns >= max_turns:
                ep.truncated = True
                continue
            admissible[i] = list(info.get("admissible_actions") or [])
            content = turn_message_fn(env_name, observation=obs, admissible_actions=admissible[i],
                                      step=ep.num_turns + 1)  # 1-based number of the next decision
            turn = chat.turn_ids(content)
            if budget_left(ep) - len(turn) < 2:
                ep.truncated = True
                continue
            ep.tokens.add_env(turn)
            ep.messages.append({"role": "user", "content": content})
            still.append(i)
        active = still
    return episodes


def _candidates(active: list[int], admissible: list[list[str]], caps: dict[int, int], chat: ChatTokenizer,
                response_fn: Callable[[str], str], env_name: str) -> dict[int, list[list[int]]]:
    """Per active episode, the token ids (response + eos) of every admissible action that fits its cap."""
    result: dict[int, list[list[int]]] = {}
    for i in active:
        if not admissible[i]:
            raise ValueError(f"action_selection='choose' needs the environment's admissible actions, but "
                             f"{env_name!r} gave none for episode {i}: use action_selection='generate'")
        cands = [chat.encode(response_fn(a)) + [chat.eos_token_id] for a in dict.fromkeys(admissible[i])]
        result[i] = [c for c in cands if len(c) <= caps[i]]
    return result


def to_trajectory(episode: Episode, *, step: int, traj_id: str, split: str = "train", advantage: float = 0.0,
                  base_logps: Sequence[float] | None = None) -> Trajectory:
    """The skill lifecycle's view of an episode.

    ``base_logps`` (one per completion token, log p under the rollout weights with the student prompt) falls
    back to the generator's own log-probs when it returned them. ``metadata`` carries what the analyzer reads
    (``skills.render``): ``actions`` and ``observations`` one per turn (the action, then the observation the
    environment returned for it), ``env``, plus ``initial_observation``, ``valid`` and episode bookkeeping.
    """
    tokens = episode.tokens
    if base_logps is None and episode.has_logps:
        base_logps = tokens.completion_logps
    if base_logps is not None and len(base_logps) != len(tokens.completion_ids):
        raise ValueError(f"base_logps has {len(base_logps)} values for {len(tokens.completion_ids)} completion "
                         f"tokens of episode {traj_id}")
    return Trajectory(
        traj_id=traj_id, task_id=episode.task_id, scope=episode.scope, task=episode.task,
        messages=[dict(m) for m in episode.messages], prompt_messages=[dict(m) for m in episode.prompt_messages],
        responses=list(episode.responses), reward=float(episode.reward), success=bool(episode.won),
        advantage=float(advantage), split=split, step=int(step), prompt_ids=list(tokens.prompt_ids),
        completion_ids=list(tokens.completion_ids), completion_mask=list(tokens.completion_mask),
        base_logps=[float(x) for x in base_logps] if base_logps is not None else None,
        global_version=episode.global_version,
        metadata={"actions": list(episode.actions), "observations": list(episode.observations[1:]),
                  "env": episode.env_name, "initial_observation": episode.observations[0] if episode.observations
                  else "", "valid": list(episode.valid), "score": float(episode.score), "num_turns": episode.num_turns,
                  "truncated": episode.truncated, "error": episode.error, "group_index": episode.group_index,
                  "invalid_actions": episode.invalid_actions},
    )


__all__ = ["ACTION_SELECTIONS", "Episode", "GenerateFn", "Generation", "hf_generate_fn", "run_episodes",
           "to_trajectory"]
