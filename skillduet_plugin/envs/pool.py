"""Many text-environment episodes stepped in parallel worker processes, robust to crashing or hanging engines.

``pool.reset(task_ids)`` starts one episode per task id (episode k = position k; a GRPO group of G rollouts of
one task is G entries), ``pool.step(episode_ids, actions)`` advances some of them. Consecutive episodes go to
the same worker, so a group of one task reuses that worker's parsed game. A worker that dies or exceeds a
timeout is killed and restarted; its episodes end as failures (``done=True``, ``reward=0``, ``error`` set)
instead of stopping the run.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import time
import traceback
from dataclasses import dataclass, field
from multiprocessing.connection import wait as wait_connections
from typing import Any, Callable, Sequence

from skillduet_plugin.core.registry import resolve_target
from skillduet_plugin.envs.registry import env_spec


@dataclass
class StepResult:
    """One episode's answer to a reset or step; ``error`` is set when the episode was ended by a failure."""

    obs: str
    reward: float
    done: bool
    info: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def _load_factory(target: str | Callable[..., Any]) -> Callable[..., Any]:
    """The factory itself (in process) or the one a ``"module:function"`` string names (in a spawned worker)."""
    return target if callable(target) else resolve_target(target, "factory")


class _EpisodeRunner:
    """Holds the env instances of the episodes one process serves; env instances are reused across batches."""

    def __init__(self, target: str | Callable[..., Any], env_kwargs: dict[str, Any]) -> None:
        self._factory = _load_factory(target)
        self._env_kwargs = env_kwargs
        self._slots: list[Any] = []
        self._episodes: dict[int, int] = {}  # episode id -> slot

    def _env(self, slot: int) -> Any:
        while len(self._slots) <= slot:
            self._slots.append(None)
        if self._slots[slot] is None:
            self._slots[slot] = self._factory(**self._env_kwargs)
        return self._slots[slot]

    def _discard(self, slot: int) -> None:
        env, self._slots[slot] = self._slots[slot], None
        try:
            if env is not None:
                env.close()
        except Exception:  # noqa: BLE001 - a broken env may fail to close; it is dropped either way
            pass

    def reset(self, eid: int, task_id: str) -> tuple:
        slot = self._episodes.setdefault(eid, len(self._episodes))
        try:
            obs, info = self._env(slot).reset(task_id)
            return eid, obs, 0.0, False, info, None
        except Exception as exc:  # noqa: BLE001 - one bad game must not stop the others
            self._discard(slot)
            return eid, "", 0.0, True, {"won": False, "task_id": task_id}, _describe(exc, "reset")

    def step(self, eid: int, action: str) -> tuple:
        slot = self._episodes.get(eid)
        if slot is None or slot >= len(self._slots) or self._slots[slot] is None:
            return eid, "", 0.0, True, {"won": False}, f"episode {eid} has no live environment"
        try:
            obs, reward, done, info = self._slots[slot].step(action)
            return eid, obs, float(reward), bool(done), info, None
        except Exception as exc:  # noqa: BLE001
            self._discard(slot)
            return eid, "", 0.0, True, {"won": False}, _describe(exc, "step")

    def new_batch(self) -> None:
        self._episodes.clear()

    def close(self) -> None:
        for slot in range(len(self._slots)):
            self._discard(slot)


def _describe(exc: BaseException, where: str) -> str:
    last = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    at = f" at {last[0].filename}:{last[0].lineno}" if last else ""
    return f"env error in {where}: {type(exc).__name__}: {exc}{at}"


def _worker_main(conn: Any, target: str, env_kwargs: dict[str, Any]) -> None:
    """Worker loop: ``("reset"|"step", [(eid, payload), ...])`` -> one message per episode, as it finishes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when workers stop
    runner = _EpisodeRunner(target, env_kwargs)
    try:
        while True:
            try:
                kind, items = conn.recv()
            except EOFError:
                return
            if kind == "close":
                return
            if kind == "reset":
                runner.new_batch()
            for eid, payload in items:
                conn.send(runner.reset(eid, payload) if kind == "reset" else runner.step(eid, payload))
    finally:
        runner.close()


class _Worker:
    def __init__(self, ctx: Any, target: str, env_kwargs: dict[str, Any]) -> None:
        self.conn, child = ctx.Pipe(duplex=True)
        self.process = ctx.Process(target=_worker_main, args=(child, target, env_kwargs), daemon=True)
        self.process.start()
        child.close()

    def exit_description(self) -> str:
        self.process.join(timeout=2.0)
        code = self.process.exitcode
        return f"exit code {code}" if code is not None else "connection lost"

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5.0)
        self.conn.close()


class EnvPool:
    """Parallel episodes of env ``env_name``; ``num_workers=0`` runs them in this process (no timeouts)."""

    def __init__(self, env_name: str, *, num_workers: int = 2, env_kwargs: dict[str, Any] | None = None,
                 step_timeout_s: float = 60.0, reset_timeout_s: float = 120.0, mp_context: str = "spawn") -> None:

        spec = env_spec(env_name)  # an unknown name fails here, listing the registered ones
        if num_workers < 0:
            raise ValueError(f"num_workers={num_workers} must be >= 0 (0 = in-process)")
        if step_timeout_s <= 0 or reset_timeout_s <= 0:
            raise ValueError("step_timeout_s and reset_timeout_s must be > 0 seconds")
        self.env_name = env_name
        self.num_workers = num_workers
        self.step_timeout_s = float(step_timeout_s)
        self.reset_timeout_s = float(reset_timeout_s)
        # Resolved here so that envs registered in this process also work in spawned workers.
        self._target = spec.target
        self._env_kwargs = dict(env_kwargs or {})
        # same default split as envs.make: the factories' own defaults differ (WebShop's is its test panel)
        self._env_kwargs.setdefault("split", "train")
        self._ctx = mp.get_context(mp_context) if num_workers else None
        self._workers: list[_Worker] = [self._spawn() for _ in range(num_workers)]
        self._local = _EpisodeRunner(spec.factory, self._env_kwargs) if num_workers == 0 else None
        self._owner: list[int] = []  # episode id -> worker index
        self._last_info: list[dict[str, Any]] = []
        self._lost: dict[int, str] = {}  # episode id -> why it can no longer be stepped
        self._finished: set[int] = set()  # episodes that ended normally
        self._closed = False
        self.restarts = 0

    def _spawn(self) -> _Worker:
        return _Worker(self._ctx, self._target, self._env_kwargs)

    @property
    def num_episodes(self) -> int:
        return len(self._owner)

    # -- public API ---------------------------------------------------------------------------------------
    def reset(self, task_ids: Sequence[str]) -> list[StepResult]:
        """Start one episode per task id (episode k = ``task_ids[k]``); earlier episodes are dropped."""
        self._check_open()
        task_ids = list(task_ids)
        n, w = len(task_ids), max(self.num_workers, 1)
        self._owner = [k * w // n for k in range(n)] if n else []
        self._last_info = [{"task_id": t} for t in task_ids]
        self._lost, self._finished = {}, set()
        if self._local is not None:
            self._local.new_batch()
        return self._dispatch("reset", list(range(n)), task_ids, self.reset_timeout_s)

    def step(self, episode_ids: Sequence[int], actions: Sequence[str]) -> list[StepResult]:
        """Apply ``actions[i]`` to episode ``episode_ids[i]``, all in parallel; results in the same order."""
        self._check_open()
        episode_ids, actions = [int(e) for e in episode_ids], list(actions)
        if len(episode_ids) != len(actions):
            raise ValueError(f"got {len(episode_ids)} episode_ids but {len(actions)} actions")
        if len(set(episode_ids)) != len(episode_ids):
            raise ValueError("episode_ids has duplicates: step each episode at most once per call")
        bad = [e for e in episode_ids if not 0 <= e < self.num_episodes]
        if bad:
            raise IndexError(f"episode ids {bad} are outside this batch (0..{self.num_episodes - 1}); "
                             "ids are positions in the task_ids given to reset()")
        return self._dispatch("step", episode_ids, actions, self.step_timeout_s)

    def close(self) -> None:
        """Stop the workers (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for worker in self._workers:
            try:
                worker.conn.send(("close", []))
            except (OSError, ValueError):
                pass
        for worker in self._workers:
            worker.process.join(timeout=5.0)
            worker.kill()
        if self._local is not None:
            self._local.close()

    def __enter__(self) -> "EnvPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort at interpreter exit
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass

    # -- internals ----------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("EnvPool is closed")

    def _failure(self, eid: int, error: str) -> StepResult:
        info = {**self._last_info[eid], "won": False, "score": 0.0, "admissible_actions": [], "error": error}
        return StepResult(obs="", reward=0.0, done=True, info=info, error=error)

    def _record(self, eid: int, obs: str, reward: float, done: bool, info: dict, error: str | None) -> StepResult:
        if error is not None:
            self._lost[eid] = error
            return self._failure(eid, error)
        self._last_info[eid] = info
        if done:
            self._finished.add(eid)
        return StepResult(obs=obs, reward=reward, done=done, info=info, error=None)

    def _dispatch(self, kind: str, eids: list[int], payloads: list[Any], timeout: float) -> list[StepResult]:
        results: dict[int, StepResult] = {}
        todo: dict[int, list[tuple[int, Any]]] = {}
        for eid, payload in zip(eids, payloads):
            if eid in self._lost:
                results[eid] = self._failure(eid, self._lost[eid])
            else:
                todo.setdefault(self._owner[eid], []).append((eid, payload))
        if self._local is not None:
            for eid, payload in todo.get(0, []):
                answer = self._local.reset(eid, payload) if kind == "reset" else self._local.step(eid, payload)
                results[eid] = self._record(*answer)
        else:
            self._run_remote(kind, todo, timeout, results)
        return [results[eid] for eid in eids]

    def _run_remote(self, kind: str, todo: dict[int, list[tuple[int, Any]]], timeout: float,
                    results: dict[int, StepResult]) -> None:
        pending: dict[int, list[int]] = {}
        deadline: dict[int, float] = {}
        for w, items in todo.items():
            try:
                self._workers[w].conn.send((kind, items))
            except (OSError, ValueError) as exc:
                self._restart(w, f"worker crashed: {exc}", [eid for eid, _ in items], results)
                continue
            pending[w] = [eid for eid, _ in items]
            deadline[w] = time.monotonic() + timeout
        while pending:
            by_conn = {self._workers[w].conn: w for w in pending}
            wait_s = max(0.0, min(deadline.values()) - time.monotonic())
            for conn in wait_connections(list(by_conn), timeout=wait_s):
                w = by_conn[conn]
                try:
                    answer = conn.recv()
                except (EOFError, OSError):
                    why = f"worker crashed: {self._workers[w].exit_description()}"
                    self._restart(w, why, pending.pop(w), results)
                    deadline.pop(w)
                    continue
                results[answer[0]] = self._record(*answer)
                pending[w].remove(answer[0])
                deadline[w] = time.monotonic() + timeout  # each episode gets the full timeout
                if not pending[w]:
                    del pending[w], deadline[w]
            now = time.monotonic()
            for w in [w for w, d in deadline.items() if now >= d]:
                what = "reset" if kind == "reset" else "step"
                self._restart(w, f"{what} timed out after {timeout:g}s", pending.pop(w), results)
                deadline.pop(w)

    def _restart(self, w: int, why: str, in_flight: list[int], results: dict[int, StepResult]) -> None:
        """Kill worker ``w``, fail its in-flight episodes with ``why`` and mark its other episodes lost."""
        self._workers[w].kill()
        self._workers[w] = self._spawn()
        self.restarts += 1
        for eid in in_flight:
            self._lost[eid] = why
            results[eid] = self._failure(eid, why)
        for eid, owner in enumerate(self._owner):
            if owner == w and eid not in self._lost and eid not in self._finished:
                self._lost[eid] = f"worker crashed: restarted after another episode failed ({why})"


__all__ = ["EnvPool", "StepResult"]
