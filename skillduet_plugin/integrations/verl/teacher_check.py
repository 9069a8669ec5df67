"""The teacher check on verl (``skillduet.teacher_check_samples``), the same measurement as TRL's.

Each step, after extraction, every task of the batch that got a Local skill is played ``teacher_check_samples``
times with that skill in its prompt (the OPD teacher's context, ``lifecycle.teacher_messages``) and as many times
without (the student's prompt, with the Global when one is used), all with the rollout weights: held-out episodes,
never trained on. ``rollout.teacher_check`` runs the check and names the metrics (``teacher_check/success_with_local``,
``.../success_without_local``, ``.../difference``, the TRL trainer's too); this module only plays its episodes: on
the driver, against the rollout servers through verl's ``LLMServerClient``, with ``integrations.verl.episodes``
(the agent loop's engine, environments and requests). Each check request carries its own sampling ``seed`` (from
``data.seed``, the step and the episode), so the check draws from per-request generators and the training rollouts
draw what they would draw without it. The rollout replicas stay awake for it until the advantage phase is done (as
with ``teacher_logprobs: rollout``).
"""

from __future__ import annotations

import asyncio
import random
from typing import Any, Sequence

from skillduet_plugin.integrations.verl.episodes import ENV_CACHE, make_engine, play_episode
from skillduet_plugin.integrations.verl.server_logprobs import run_coroutine
from skillduet_plugin.rollout.engine import Episode, StudentFn
from skillduet_plugin.rollout.teacher_check import check_metrics, check_wins, skills_by_task, teacher_check
from skillduet_plugin.skills.teacher_plan import TeacherPlan


def check_sampling_params(rollout: Any) -> dict[str, Any]:
    """The training rollouts' sampling (``actor_rollout_ref.rollout``), as verl's agent-loop worker builds it."""
    return {"temperature": float(rollout.temperature), "top_p": float(rollout.get("top_p", 1.0)),
            "top_k": int(rollout.get("top_k", -1)), "repetition_penalty": 1.0, "logprobs": True}


class TeacherCheck:
    """Mixed into ``SkillDuetTrainer`` (it holds ``config``, ``skillduet``, ``lifecycle``, ``chat``, ``global_steps``,
    ``_trajectories`` and ``_client()``)."""

    def _teacher_check_on(self) -> bool:
        return int(getattr(self.skillduet, "teacher_check_samples", 0) or 0) > 0 and \
            self.skillduet.method.extract_local

    def _teacher_check(self, plan: TeacherPlan, splits: dict[str, str], metrics: dict) -> None:
        """Play the step's tasks with and without their Local skill and add the check's metrics."""
        rows = [row for row, _ in self._trajectories]
        tasks = [traj.task_id for _, traj in self._trajectories]
        skills = skills_by_task(tasks, [plan.skills[row] for row in rows])
        result = teacher_check(skills, lifecycle=self.lifecycle, samples=int(self.skillduet.teacher_check_samples),
                               play=lambda ids, fns: self._play_check(ids, fns, splits))
        metrics.update(check_metrics(*check_wins(result)))

    def _play_check(self, task_ids: Sequence[str], fns: Sequence[StudentFn | None],
                    splits: dict[str, str]) -> list[Episode]:
        rollout = self.config.actor_rollout_ref.rollout
        engine = make_engine(self.skillduet, self.chat, int(rollout.response_length))
        client, params = self._client(), check_sampling_params(rollout)
        seed = random.Random(f"teacher_check/{self.config.data.get('seed', None)}/{self.global_steps}")
        seeds = [seed.getrandbits(31) for _ in task_ids]

        async def one(task_id: str, fn: StudentFn | None, episode_seed: int) -> Episode:
            loop = asyncio.get_running_loop()

            async def call(func, *args, **kwargs):
                return await loop.run_in_executor(None, lambda: func(*args, **kwargs))

            async def prompt_for(scope: str):
                return fn, None

            key, env = await call(ENV_CACHE.acquire, self.skillduet.env, splits.get(task_id, "train"))
            try:
                episode, *_ = await play_episode(engine, env, task_id, generate=client.generate, call=call,
                                                 sampling_params=dict(params, seed=episode_seed),
                                                 prompt_for=prompt_for)
            finally:
                ENV_CACHE.release(key, env)
            return episode

        async def play_all() -> list[Episode]:
            return list(await asyncio.gather(*[one(t, f, s) for t, f, s in zip(task_ids, fns, seeds)]))

        return run_coroutine(play_all())


__all__ = ["TeacherCheck", "check_sampling_params"]
