"""The one multi-turn episode engine: a state machine per episode that does no I/O, and the episode -> Trajectory
mapping.

Every path that plays or lays out an episode drives :class:`EpisodeState` (the TRL collector in lockstep batches,
the verl agent loop against the rollout server, the warm start replaying expert episodes, the evaluation through
the collector), so the token layout, budgets, masks, log-prob rule and the per-turn record cannot drift apart:

``engine.start(task_id, obs, info)`` (first prompt, Global inserted by the caller's ``student_fn``) ->
``state.next_request()`` (context and turn cap, or None when the episode is over) -> the driver generates ->
``state.on_generation(gen)`` (policy tokens, closing eos, action projection; returns the action) -> the driver
steps the environment -> ``state.on_step(obs, reward, done, info)`` (record, stopping rules, next user turn as
masked tokens) -> ``next_request()`` again.

Rules (the same for every driver):
- budget: ``max_total_tokens`` over prompt + completion and ``max_completion_tokens`` over the completion (either
  may be None); a turn needs room for one generated token plus a closing eos, else the episode ends ``truncated``.
- a policy turn cut by its cap gets an eos appended with mask 0, so every assistant turn is closed.
- log-probs: an episode carries sampling log-probs only when every policy turn returned them for every token.
- record: ``observations[0]`` is the first observation and ``observations[i + 1]`` answers ``actions[i]``;
  :func:`to_trajectory` hands the analyzer the initial observation separately, aligned per turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from skillduet_plugin.core.conversation import ChatTokenizer, EpisodeTokens
from skillduet_plugin.core.names import ACTION_SELECTIONS, scope_key
from skillduet_plugin.core.settings import check
from skillduet_plugin.envs import prompts
from skillduet_plugin.envs.projection import project_action
from skillduet_plugin.rollout.responses import action_response
from skillduet_plugin.skills.types import Trajectory


@dataclass
class Generation:
    """One sampled continuation: the new token ids (ending in eos if the model produced it) and, if the
    generator computed them, the sampling log-probs of those tokens."""

    token_ids: list[int]
    logps: list[float] | None = None


@dataclass
class TurnRequest:
    """What the driver must produce next: a continuation of ``context_ids`` of at most ``max_new_tokens`` tokens
    (choose mode: one of ``candidates``, each a full response ending in eos)."""

    context_ids: list[int]
    max_new_tokens: int
    candidates: list[list[int]] | None = None


@dataclass
class Episode:
    """One finished episode of the policy in a text environment.

    ``prompt_messages`` is the first prompt without any skill text; ``student_messages`` is what the policy
    actually saw (with the Global when one was inserted); ``messages`` is the whole conversation from the
    student's view. ``observations[0]`` is the first observation and ``observations[i + 1]`` the one the
    environment returned for ``actions[i]``. ``valid[i]`` says whether ``actions[i]`` was parsed as an
    admissible action. ``choices`` (choose mode): per policy turn, the completion offset where its response starts
    and the candidate responses it was chosen from. ``reward`` is the sum of the environment's step rewards.
    ``scope`` is the Global's scope key (``config.scope``), ``task_type`` the environment's task type.
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
    task_type: str = ""
    choices: list[tuple[int, list[list[int]]]] = field(default_factory=list)

    @property
    def invalid_actions(self) -> int:
        """Number of turns whose response did not parse to an admissible action."""
        return sum(1 for ok in self.valid if not ok)


# student_fn(prompt_messages, task, scope) -> (the messages the policy sees, the Global version inserted)
StudentFn = Callable[[list[dict[str, str]], str, str], tuple[list[dict[str, str]], int | None]]


class EpisodeEngine:
    """Per-run settings of the episode state machine; :meth:`start` opens one episode.

    Args:
        env_name: environment name for prompts and action projection (``envs.prompts`` / ``envs.projection``).
        chat: tokenises prompts and environment turns.
        max_turns: policy turns per episode at most.
        max_new_tokens: tokens per policy turn at most.
        max_total_tokens / max_completion_tokens: prompt + completion / completion tokens per episode at most
            (None: no cap of that kind).
        scope: ``config.scope`` (``task_type``, ``task`` or ``single``): the key of the Global an episode reads.
        system_prompt, initial_messages_fn, turn_message_fn, project_action_fn: see ``rollout.collector``.
        action_selection: ``generate`` or ``choose`` (candidates from ``action_response_fn``, see
            ``rollout.choice``).
    """

    def __init__(self, env_name: str, chat: ChatTokenizer, *, max_turns: int, max_new_tokens: int,
                 max_total_tokens: int | None, max_completion_tokens: int | None = None, scope: str,
                 system_prompt: str | None = None,
                 initial_messages_fn: Callable[..., list[dict[str, str]]] | None = None,
                 turn_message_fn: Callable[..., str] | None = None,
                 project_action_fn: Callable[..., tuple[str, bool]] | None = None,
                 action_selection: str, action_response_fn: Callable[[str], str] | None = None) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns={max_turns!r} must be >= 1")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={max_new_tokens!r} must be >= 1")
        check("action_selection", action_selection, choices=ACTION_SELECTIONS)
        scope_key(scope, task_type="", task_id="")  # a bad scope fails here, before any episode runs
        initial_messages_fn = initial_messages_fn or prompts.initial_messages
        turn_message_fn = turn_message_fn or prompts.turn_message
        project_action_fn = project_action_fn or project_action
        if action_selection == "choose" and action_response_fn is None:
            action_response_fn = action_response
        self.env_name, self.chat, self.scope = env_name, chat, scope
        self.max_turns, self.max_new_tokens = int(max_turns), int(max_new_tokens)
        self.max_total_tokens, self.max_completion_tokens = max_total_tokens, max_completion_tokens
        self.system_prompt = system_prompt
        self.initial_messages_fn, self.turn_message_fn = initial_messages_fn, turn_message_fn
        self.project_action_fn = project_action_fn
        self.choosing = action_selection == "choose"
        self.action_response_fn = action_response_fn

    def scope_of(self, task_id: str, info: dict[str, Any]) -> str:
        """The scope key of a task under this run's ``scope`` setting."""
        return scope_key(self.scope, task_type=str(info.get("task_type", "unknown")), task_id=str(task_id))

    def start(self, task_id: str, obs: Any, info: dict[str, Any] | None, *, error: str | None = None,
              group_index: int = 0, student_fn: StudentFn | None = None) -> "EpisodeState":
        """Open an episode from the environment's reset result; ``student_fn`` inserts the Global (skipped for a
        failed reset: an episode whose worker died is never shown a Global)."""
        info = dict(info or {})
        task, task_type = str(info.get("task", "")), str(info.get("task_type", "unknown"))
        scope = self.scope_of(task_id, info)
        adm = list(info.get("admissible_actions") or [])
        obs = "" if obs is None else str(obs)
        if error is not None and not task:  # a failed reset tells no task: the episode ends at once, unplayed
            prompt = [{"role": "user", "content": f"The environment failed to start task {task_id}: {error}"}]
        else:
            prompt = self.initial_messages_fn(self.env_name, task=task, observation=obs, admissible_actions=adm,
                                              system_prompt=self.system_prompt)
        student, version = prompt, None
        if student_fn is not None and error is None:
            student, version = student_fn(prompt, task, scope)
        episode = Episode(task_id=str(task_id), scope=scope, task=task, group_index=group_index,
                          prompt_messages=[dict(m) for m in prompt], student_messages=[dict(m) for m in student],
                          messages=[dict(m) for m in student], tokens=EpisodeTokens(self.chat.prompt_ids(student)),
                          observations=[obs], global_version=version, env_name=self.env_name, task_type=task_type)
        return EpisodeState(self, episode, adm, error)


class EpisodeState:
    """One running episode: alternates :meth:`next_request` / :meth:`on_generation` / :meth:`on_step`."""

    def __init__(self, engine: EpisodeEngine, episode: Episode, admissible: list[str], error: str | None) -> None:
        self.engine, self.episode, self.admissible = engine, episode, admissible
        self.finished = False
        self._request: TurnRequest | None = None
        self._awaiting_step = False
        self._all_logps = True
        if error is not None:
            episode.error = str(error)
            self.finished = True

    def budget_left(self) -> int:
        """Tokens the episode may still add under both caps."""
        e, tokens = self.engine, self.episode.tokens
        left = 1 << 62
        if e.max_total_tokens is not None:
            left = min(left, e.max_total_tokens - len(tokens))
        if e.max_completion_tokens is not None:
            left = min(left, e.max_completion_tokens - len(tokens.completion_ids))
        return left

    def _truncate(self) -> None:
        self.episode.truncated = True
        self.finished = True

    def next_request(self) -> TurnRequest | None:
        """The next policy turn to produce, or None when the episode is over (done, failed or out of budget)."""
        if self.finished:
            return None
        if self._awaiting_step:
            raise RuntimeError("next_request() before on_step(): step the environment with the last action first")
        if self._request is not None:
            return self._request
        e, left = self.engine, self.budget_left()
        if left < 2:  # one generated token plus a closing eos
            self._truncate()
            return None
        context = self.episode.tokens.context_ids
        if not e.choosing:
            self._request = TurnRequest(context, min(e.max_new_tokens, left - 1))
            return self._request
        # A candidate ends in its own eos, so it may use the whole remaining budget.
        cap = min(e.max_new_tokens, left)
        if not self.admissible:
            raise ValueError(f"action_selection='choose' needs the environment's admissible actions, but "
                             f"{e.env_name!r} gave none for task {self.episode.task_id!r}: use "
                             f"action_selection='generate'")
        cands = [e.chat.encode(e.action_response_fn(a)) + [e.chat.eos_token_id]  # type: ignore[misc]
                 for a in dict.fromkeys(self.admissible)]
        cands = [c for c in cands if len(c) <= cap]
        if not cands:
            self._truncate()
            return None
        self._request = TurnRequest(context, cap, cands)
        return self._request

    def on_generation(self, generation: Generation) -> str:
        """Record the policy's turn (cut to the request's cap) and return the action to send to the environment."""
        request, self._request = self._request, None
        if request is None:
            raise RuntimeError("on_generation() without a pending next_request()")
        e, ep, chat = self.engine, self.episode, self.engine.chat
        ids = [int(t) for t in generation.token_ids][:request.max_new_tokens]
        logps = list(generation.logps)[:len(ids)] if generation.logps is not None else None
        turn_logps = logps is not None and len(logps) == len(ids)
        self._all_logps = self._all_logps and turn_logps
        ep.has_logps = self._all_logps
        decisive = None
        if request.candidates is not None:
            decisive = decisive_mask(ids, request.candidates)
            ep.choices.append((len(ep.tokens.completion_ids), [list(c) for c in request.candidates]))
        ep.tokens.add_policy(ids, logps if turn_logps else None, decisive)
        if not ids or ids[-1] != chat.eos_token_id:
            ep.tokens.add_env([chat.eos_token_id])  # close the turn; not the policy's token
        # Special tokens such as <action> may be registered as "special": drop only eos/pad, keep the rest.
        text = chat.tokenizer.decode([t for t in ids if t not in (chat.eos_token_id, chat.pad_token_id)],
                                     skip_special_tokens=False)
        action, valid = e.project_action_fn(e.env_name, text, self.admissible)
        ep.responses.append(text)
        ep.messages.append({"role": "assistant", "content": text})
        ep.actions.append(action)
        ep.valid.append(bool(valid))
        ep.num_turns += 1
        self._awaiting_step = True
        return action

    def on_step(self, obs: Any, reward: float | None, done: bool, info: dict[str, Any] | None,
                error: str | None = None) -> None:
        """Record the environment's answer to the last action; end the episode or append the next user turn."""
        if not self._awaiting_step:
            raise RuntimeError("on_step() without an action: call on_generation() first")
        self._awaiting_step = False
        e, ep, info = self.engine, self.episode, dict(info or {})
        ep.reward += float(reward or 0.0)
        ep.won = bool(info.get("won", ep.won))
        ep.score = float(info.get("score", ep.score) or 0.0)
        obs = "" if obs is None else str(obs)
        ep.observations.append(obs)
        if error is not None:
            ep.error = str(error)
            self.finished = True
            return
        if done:
            self.finished = True
            return
        if ep.num_turns >= e.max_turns:
            self._truncate()
            return
        self.admissible = list(info.get("admissible_actions") or [])
        content = e.turn_message_fn(e.env_name, observation=obs, admissible_actions=self.admissible,
                                    step=ep.num_turns + 1)  # 1-based number of the next decision
        turn = e.chat.turn_ids(content)
        if self.budget_left() - len(turn) < 2:
            self._truncate()
            return
        ep.tokens.add_env(turn)
        ep.messages.append({"role": "user", "content": content})


def decisive_mask(chosen: Sequence[int], candidates: Sequence[Sequence[int]]) -> list[int]:
    """Choose mode's loss mask over the chosen candidate's tokens: 1 where the choice was made, 0 where it was not.

    A token is decisive when another candidate shares every earlier token of the chosen one and differs at
    that position; elsewhere every candidate still possible agrees (``<think>I``, ``go to``, ``</action>`` and
    eos), so the token says nothing about which action was picked. Training on those tokens would push a
    failing episode's shared prefix down for every action that starts with it (all ``go to`` actions at once)
    rather than the action taken; masked out, the RL and distillation losses act only on the choice.
    A forced turn (one candidate) has no decisive token.
    """
    alive = [c for c in candidates if list(c) != list(chosen)]
    mask = []
    for i, tok in enumerate(chosen):
        mask.append(int(any(len(c) > i and c[i] != tok for c in alive)))
        alive = [c for c in alive if len(c) > i and c[i] == tok]
    return mask


# ---------------------------------------------------------------------- episode -> Trajectory
_RECORD_FIELDS = ("task_id", "scope", "task_type", "task", "group_index", "prompt_messages", "student_messages",
                  "messages", "actions", "responses", "observations", "valid", "reward", "won", "score",
                  "num_turns", "truncated", "error", "global_version", "has_logps")


def episode_record(episode: Episode) -> dict[str, Any]:
    """An episode without its tokens, as plain JSON-able data (the verl agent loop's ``extra_fields`` record;
    the tokens travel as verl's tensors)."""
    record = {name: getattr(episode, name) for name in _RECORD_FIELDS}
    record["env"] = episode.env_name
    return record


def episode_from_record(record: dict[str, Any], *, prompt_ids: Sequence[int], completion_ids: Sequence[int],
                        completion_mask: Sequence[int], completion_logps: Sequence[float] | None = None) -> Episode:
    """The inverse of :func:`episode_record` with the token view given back (``completion_logps``: the sampling
    log-probs, when the driver kept them); missing keys take defaults."""
    tokens = EpisodeTokens(prompt_ids=[int(x) for x in prompt_ids], completion_ids=[int(x) for x in completion_ids],
                           completion_mask=[int(x) for x in completion_mask],
                           completion_logps=[float(x) for x in completion_logps or []])
    messages = list(record.get("messages") or [])
    prompt = list(record.get("prompt_messages") or [])
    return Episode(
        task_id=str(record["task_id"]), scope=str(record.get("scope", "unknown")), task=str(record.get("task", "")),
        group_index=int(record.get("group_index") or 0), prompt_messages=prompt,
        student_messages=list(record.get("student_messages") or prompt), messages=messages, tokens=tokens,
        actions=list(record.get("actions") or []), responses=list(record.get("responses") or []),
        observations=[str(o) for o in record.get("observations") or []], valid=list(record.get("valid") or []),
        reward=float(record.get("reward") or 0.0), won=bool(record.get("won", False)),
        score=float(record.get("score") or 0.0), num_turns=int(record.get("num_turns") or 0),
        truncated=bool(record.get("truncated", False)), error=record.get("error"),
        global_version=record.get("global_version"), env_name=str(record.get("env") or ""),
        has_logps=bool(record.get("has_logps", False)) and completion_logps is not None,
        task_type=str(record.get("task_type") or ""))


def to_trajectory(episode: Episode, *, step: int, traj_id: str, split: str = "train", advantage: float = 0.0,
                  base_logps: Sequence[float] | None = None) -> Trajectory:
    """The skill lifecycle's view of an episode (the one mapping every adapter uses).

    ``base_logps`` (one per completion token, log p under the rollout weights with the student prompt) falls
    back to the generator's own log-probs when every turn returned them. ``metadata`` carries what the analyzer
    reads (``skills.render``): ``actions`` and ``observations`` one per turn (the action, then the observation
    the environment returned for it), ``initial_observation`` (what the first prompt showed), ``env``, plus
    ``valid`` and episode bookkeeping.
    """
    tokens = episode.tokens
    if base_logps is None and episode.has_logps:
        base_logps = tokens.completion_logps
    if base_logps is not None and len(base_logps) != len(tokens.completion_ids):
        raise ValueError(f"base_logps has {len(base_logps)} values for {len(tokens.completion_ids)} completion "
                         f"tokens of episode {traj_id}")
    obs = list(episode.observations)
    return Trajectory(
        traj_id=traj_id, task_id=episode.task_id, scope=episode.scope, task=episode.task,
        messages=[dict(m) for m in episode.messages], prompt_messages=[dict(m) for m in episode.prompt_messages],
        responses=list(episode.responses), reward=float(episode.reward), success=bool(episode.won),
        advantage=float(advantage), split=split, step=int(step), prompt_ids=list(tokens.prompt_ids),
        completion_ids=list(tokens.completion_ids), completion_mask=list(tokens.completion_mask),
        base_logps=[float(x) for x in base_logps] if base_logps is not None else None,
        global_version=episode.global_version,
        metadata={"actions": list(episode.actions), "observations": obs[1:], "env": episode.env_name,
                  "initial_observation": obs[0] if obs else "", "valid": list(episode.valid),
                  "score": float(episode.score), "num_turns": episode.num_turns, "truncated": episode.truncated,
                  "error": episode.error, "group_index": episode.group_index, "task_type": episode.task_type,
                  "invalid_actions": episode.invalid_actions},
    )


__all__ = ["ACTION_SELECTIONS", "Episode", "EpisodeEngine", "EpisodeState", "Generation", "StudentFn",
           "TurnRequest", "decisive_mask", "episode_from_record", "episode_record", "to_trajectory"]
