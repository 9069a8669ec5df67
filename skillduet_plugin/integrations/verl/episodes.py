"""One episode against verl's rollout servers, wherever it is driven from: the ``skillduet_agent`` loop (a rollout
trajectory, in an agent-loop worker) and the trainer's teacher check (held-out episodes, on the driver) play with
the same engine, environments and request sequence.

The episode is played by ``rollout.engine`` (the state machine every path uses): the rollout server generates each
policy turn through ``generate(request_id=, prompt_ids=, sampling_params=)`` (verl's ``AsyncLLMServerManager`` or
its ``LLMServerClient``), the environment answers in an executor thread.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Awaitable, Callable
from uuid import uuid4

from skillduet_plugin.core.conversation import ChatTokenizer
from skillduet_plugin.core.registry import resolve_target
from skillduet_plugin.envs import make
from skillduet_plugin.integrations.verl.settings import EnvSettings, VerlSettings
from skillduet_plugin.rollout.engine import Episode, EpisodeEngine, Generation, StudentFn

#: ``generate(request_id=, prompt_ids=, sampling_params=)`` -> an output with ``token_ids``, ``log_probs`` and
#: ``extra_fields``
GenerateFn = Callable[..., Awaitable[Any]]
#: ``call(fn, *args)``: run a blocking function without blocking the event loop
CallFn = Callable[..., Awaitable[Any]]


class EnvCache:
    """Idle environments of this process, reused across episodes (ALFWorld start-up is slow)."""

    def __init__(self) -> None:
        self._idle: dict[tuple, list[Any]] = {}
        self._lock = threading.Lock()

    def acquire(self, env: EnvSettings, split: str):
        key = (env.name, env.data_dir, split, env.factory, repr(sorted(env.env_kwargs.items())))
        with self._lock:
            idle = self._idle.setdefault(key, [])
            if idle:
                return key, idle.pop()
        if env.factory:
            factory = resolve_target(env.factory, "skillduet.env.factory")
            instance = factory(data_dir=env.data_dir, split=split, **env.env_kwargs)
        else:
            instance = make(env.name, data_dir=env.data_dir, split=split, **env.env_kwargs)
        return key, instance

    def release(self, key: tuple, instance: Any) -> None:
        with self._lock:
            self._idle.setdefault(key, []).append(instance)


ENV_CACHE = EnvCache()


def make_engine(settings: VerlSettings, chat: ChatTokenizer, response_length: int) -> EpisodeEngine:
    """The episode engine of the ``skillduet.env`` settings; the whole episode (policy and environment tokens) must
    fit verl's ``response_length``."""
    env = settings.env
    return EpisodeEngine(
        env.name, chat, max_turns=env.max_turns, max_new_tokens=env.max_new_tokens_per_turn, max_total_tokens=None,
        max_completion_tokens=int(response_length), scope=settings.method.scope, system_prompt=env.system_prompt,
        action_selection="generate",  # verl's agent loop always generates (integrations.verl.settings)
        **{key: resolve_target(getattr(env, key), f"skillduet.env.{key}") if getattr(env, key) else None
           for key in ("initial_messages_fn", "turn_message_fn", "project_action_fn")})


async def play_episode(engine: EpisodeEngine, env: Any, task_id: str, *, generate: GenerateFn, call: CallFn,
                       sampling_params: dict[str, Any],
                       prompt_for: Callable[[str], Awaitable[tuple[StudentFn | None, Any]]],
                       group_index: int = 0) -> tuple[Episode, dict[str, float], list[int], Any]:
    """Play one episode of ``task_id`` on ``env``.

    ``prompt_for(scope)`` returns ``(student_fn, context)`` once the scope is known: the first prompt's builder (the
    Global of that scope, a Local skill, or None) and anything the caller wants back. Returns ``(episode, timing,
    weight_steps, context)``: seconds spent generating and in the environment, and the global step of the weights
    that generated each turn (as the server reports it).
    """
    timing = {"generate": 0.0, "env": 0.0}
    t0 = time.perf_counter()
    obs, info = await call(env.reset, task_id)
    timing["env"] += time.perf_counter() - t0
    student_fn, context = await prompt_for(engine.scope_of(task_id, info))  # config.scope: type, task or single
    state = await call(engine.start, task_id, obs, info, student_fn=student_fn, group_index=group_index)
    request_id = uuid4().hex  # one sticky session per episode (prefix cache)
    weight_steps: list[int] = []
    while (request := state.next_request()) is not None:
        params = dict(sampling_params, max_tokens=request.max_new_tokens)
        t0 = time.perf_counter()
        out = await generate(request_id=request_id, prompt_ids=request.context_ids, sampling_params=params)
        timing["generate"] += time.perf_counter() - t0
        served = (getattr(out, "extra_fields", None) or {}).get("global_steps")
        if served is not None:
            weight_steps.append(int(served))
        action = state.on_generation(Generation(list(out.token_ids), out.log_probs))
        t0 = time.perf_counter()
        obs, step_reward, done, info = await call(env.step, action)
        timing["env"] += time.perf_counter() - t0
        await call(state.on_step, obs, step_reward, done, info)
    return state.episode, timing, weight_steps, context


__all__ = ["ENV_CACHE", "EnvCache", "make_engine", "play_episode"]
