"""Behaviour-cloning warm start: a short supervised pass on expert episodes, so that a small model sometimes
succeeds and GRPO groups hold both successes and failures (nothing is paired or learned otherwise).

Every training sequence is laid out by the RL rollout's own episode engine (``rollout.engine``): the first prompt
from ``envs.prompts.initial_messages`` (sometimes with a skill section inserted at message level, as RL inserts
the Global or the teacher's Local skill: :func:`plan_skill_sections`), the assistant turns as
``<think>...</think><action>A</action>`` + eos (loss on these tokens), and the environment
turns from ``envs.prompts.turn_message`` through ``ChatTokenizer.turn_ids`` (masked out of the loss).
``warmstart.cache`` builds and caches the warm-started model.

On ALFWorld the expert is the searching expert of ``envs.alfworld.expert`` by default: a game's stored
walkthrough goes straight to the hidden object, so a clone of walkthroughs never learns what to do after looking
in the wrong place, and on unseen games it gets lost after its first guess. Measured on the CPU demo's tiny model
(2 cores): cloning walkthroughs gave 0 wins in 64 sampled training rollouts; cloning the searching expert with
the same budget wins in about half of them, so many GRPO groups mix successes and failures.

A model trained from scratch reads a skill only if cloning taught it to. An episode with a Local skill (the
analyzer's text from another episode of the same game, which says where the target was taken) is played by an
expert that acts on it (ALFWorld: it searches that receptacle first), so the OPD teacher, the same model with the
Local skill in its prompt, plays better than the student; a Global section (synthesized from other games of the
task type) comes with the expert's ordinary search. The analyzer reads only the expert's actions and observations.
"""

from __future__ import annotations

import copy
import functools
import inspect
import random
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from skillduet_plugin.core.conversation import ChatTokenizer
from skillduet_plugin.core.settings import check
from skillduet_plugin.envs.registry import env_spec
from skillduet_plugin.llm.offline import respond
from skillduet_plugin.rollout.choice import action_response
from skillduet_plugin.rollout.engine import EpisodeEngine, Generation
from skillduet_plugin.skills.consolidate import render_global
from skillduet_plugin.skills.inject import LOCAL_HEADER, global_messages, insert_sections, skill_section
from skillduet_plugin.skills.judge import parse_global_answer, parse_skill_answer
from skillduet_plugin.warmstart import EXPERTS, LOCAL_SKILL_TOKENS
from skillduet_plugin.warmstart.loss import ClonedEpisode, episode_gradient, policy_tokens
from skillduet_plugin.warmstart.workers import ClonePool, flat_parameters


def expert_response(action: str) -> str:
    """The assistant turn cloned for one expert action: ``<think>reason</think><action>action</action>`` (the
    same text choose mode scores, ``rollout.choice.action_response``)."""
    return action_response(action)


# ---------------------------------------------------------------------- experts
ExpertFn = Callable[[str, dict[str, Any], int], str]


def make_expert(env: Any, task_id: str, *, kind: str = "search", seed: int = 0,
                hint: Sequence[str] = ()) -> ExpertFn:
    """``expert(obs, info, turn) -> action`` for one episode of one task: the expert the environment registers
    (``make_expert`` of ``register_env``; ALFWorld: searching expert or walkthrough, WebShop: searching or
    goal-directed shopper). ``hint``: the actions of another episode of the same task, which a skill written
    from it describes; an expert whose factory takes ``hint`` acts on it (ALFWorld's searching expert looks
    first where that episode took the target), others ignore it."""

    check("kind", kind, choices=EXPERTS)
    factory = env_spec(env.name).make_expert
    if factory is None:
        raise TypeError(f"env {env.name!r} registers no expert: warm start cannot make expert episodes for it "
                        f"(set warm_start.enabled=false)")
    if hint and expert_takes_hint(env.name):
        return factory(env, task_id, kind, seed, hint=tuple(hint))
    return factory(env, task_id, kind, seed)


def expert_takes_hint(env_name: str) -> bool:
    """Whether the environment's registered expert acts on a skill's hint (its factory has a ``hint`` keyword)."""

    factory = env_spec(env_name).make_expert
    return factory is not None and "hint" in inspect.signature(factory).parameters


# ---------------------------------------------------------------------- episodes
@dataclass
class ExpertRecord:
    """What the environment showed along one expert episode: ``observations[k]`` and ``admissible[k]`` came
    before ``actions[k]``; the last observation answers the last action."""

    task_id: str
    scope: str
    task: str
    observations: list[str]
    admissible: list[list[str]]
    actions: list[str]
    won: bool
    seed: int = 0
    hint: tuple[str, ...] = ()


def play_expert(env: Any, task_id: str, *, max_turns: int, kind: str = "search", seed: int = 0,
                hint: Sequence[str] = (), expert: ExpertFn | None = None) -> ExpertRecord:
    """Play the expert (:func:`make_expert`, with ``hint``; or ``expert(obs, info, turn) -> action`` when given) on
    ``task_id`` for at most ``max_turns`` actions (the RL loop's turn limit)."""
    expert = expert or make_expert(env, task_id, kind=kind, seed=seed, hint=hint)
    obs, info = env.reset(task_id)
    record = ExpertRecord(task_id=task_id, scope=str(info["task_type"]), task=str(info["task"]),
                          observations=[obs], admissible=[list(info["admissible_actions"])], actions=[], won=False,
                          seed=seed, hint=tuple(hint))
    for turn in range(max_turns):
        action = expert(obs, info, turn)
        obs, _reward, done, info = env.step(action)
        record.actions.append(action)
        record.observations.append(obs)
        record.admissible.append(list(info.get("admissible_actions") or []))
        record.won = bool(info.get("won", False))
        if done:
            break
    return record


def layout_episode(record: ExpertRecord, env_name: str, chat: ChatTokenizer, *, max_total_tokens: int,
                   skill_sections: Callable[[list[dict], str, str], list[dict]] | None = None) -> ClonedEpisode:
    """Tokens of an expert episode laid out by the rollout engine itself (``rollout.engine``): the expert's
    responses are replayed as the policy's turns and the recorded observations as the environment's answers, so
    a cloned sequence is token for token what a rollout of the same choices is. ``skill_sections(messages,
    task, scope)`` (if given) inserts skill text into the first prompt. The episode stops before a turn that
    would not fit ``max_total_tokens`` whole (a cut response is never cloned), as the engine truncates."""
    # the record's scope is its task type: a cloned episode is keyed as it was recorded; the expert's responses are
    # replayed as generated turns
    engine = EpisodeEngine(env_name, chat, max_turns=max(1, len(record.actions)), max_new_tokens=max_total_tokens,
                           max_total_tokens=max_total_tokens, scope="task_type", action_selection="generate")

    def student_fn(prompt: list[dict], task: str, scope: str) -> tuple[list[dict], None]:
        return skill_sections(prompt, task, scope), None

    first = {"task": record.task, "task_type": record.scope, "admissible_actions": record.admissible[0]}
    state = engine.start(record.task_id, record.observations[0], first,
                         student_fn=student_fn if skill_sections is not None else None)
    n = 0
    for k, action in enumerate(record.actions):
        request = state.next_request()
        policy = chat.encode(expert_response(action)) + [chat.eos_token_id]
        if request is None or len(policy) > request.max_new_tokens:
            break
        state.on_generation(Generation(policy))
        n = k + 1
        state.on_step(record.observations[k + 1], 0.0, n == len(record.actions),  # the record ends: done
                      {"admissible_actions": record.admissible[k + 1]})
    ep = state.episode
    return ClonedEpisode(task_id=record.task_id, scope=record.scope, tokens=ep.tokens,
                         student_messages=ep.student_messages, messages=ep.messages, actions=record.actions[:n],
                         won=record.won and n == len(record.actions),
                         with_skill=ep.student_messages != ep.prompt_messages)


@dataclass(frozen=True)
class SkillPlan:
    """The skill section one cloning episode carries, written by the offline analyzer from other expert episodes
    (their actions and observations only, never the game's state), as RL shows skills:

    - ``local``: a ``## Hindsight skill`` section (the OPD teacher's Local skill) from another won episode, of
      the *same* task when there is one (half of the time) or of another task of the scope; the episode is
      re-played with that episode's actions as the expert's ``hint``, so the clone learns to act on what a Local
      skill says (on ALFWorld: look first where that episode took its target), right or wrong: only its
      content, not its presence, tells where to look;
    - ``global``: a ``## Skills`` section (the rollouts' Global) synthesized from won episodes of *other* tasks
      of the scope, with the expert playing as without it (such text carries the task type's procedure, not
      where this game's objects are).
    """

    kind: str
    text: str
    donor: int


def plan_skill_sections(records: Sequence[ExpertRecord], env_name: str, *, skill_fraction: float,
                        skill_token_budget: int, seed: int = 0) -> list[SkillPlan | None]:
    """Per record, the skill section it carries (None for about ``1 - skill_fraction`` of them): two thirds of
    the others a Local skill (from another won episode of the same task when there is one and a coin says so, else
    of another task of the scope), the rest a Global."""
    rng = random.Random(seed)
    won = [i for i, rec in enumerate(records) if rec.won]
    plans: list[SkillPlan | None] = []
    for i, rec in enumerate(records):
        if rng.random() >= skill_fraction:
            plans.append(None)
            continue
        same_task = [j for j in won if j != i and records[j].task_id == rec.task_id]
        others = [j for j in won if records[j].scope == rec.scope and records[j].task_id != rec.task_id]
        if (same_task or others) and rng.random() < 2 / 3:
            donor = rng.choice(same_task if same_task and (rng.random() < 0.5 or not others) else others)
            plans.append(SkillPlan("local", analyzer_skill(records[donor], env_name), donor))
        elif others:
            donors = rng.sample(others, min(2, len(others)))
            text = synthesized_global([analyzer_skill(records[j], env_name) for j in donors], skill_token_budget)
            plans.append(SkillPlan("global", text, donors[0]))
        else:
            plans.append(None)
    return plans


def analyzer_skill(record: ExpertRecord, env_name: str) -> str:
    """The offline analyzer's Local skill (``local_procedure``) for one won expert episode."""

    trajectory = {"traj_id": f"{record.task_id}/{record.seed}", "task": record.task, "actions": record.actions,
                  "observations": record.observations, "won": record.won, "reward": float(record.won)}
    return parse_skill_answer(respond({"kind": "local_procedure", "env": env_name, "task": record.task,
                                       "scope": record.scope, "trajectory": trajectory})) or ""


def synthesized_global(local_texts: Sequence[str], budget_tokens: int) -> str:
    """The offline synthesizer's Global from Local skills, as a consolidation writes it."""

    items = parse_global_answer(respond({"kind": "synthesize", "current": [], "new": list(local_texts),
                                         "budget_tokens": budget_tokens}))
    return render_global(items or [])


def build_cloning_data(records: Sequence[ExpertRecord], env_name: str, chat: ChatTokenizer, *,
                       max_total_tokens: int, plans: Sequence[SkillPlan | None], skill_token_budget: int,
                       skill_position: str, local_token_budget: int = LOCAL_SKILL_TOKENS) -> list[ClonedEpisode]:
    """Cloning episodes from expert records, each with the skill section of its plan
    (:func:`plan_skill_sections`), inserted as RL inserts the Global or a teacher's Local skill (at the run's
    ``skill_position``)."""
    if len(plans) != len(records):
        raise ValueError(f"{len(plans)} skill plans for {len(records)} expert records")
    result = []
    for rec, plan in zip(records, plans):
        insert = None
        if plan is not None:
            insert = functools.partial(_insert_section, plan=plan, position=skill_position, tokenizer=chat.tokenizer,
                                       budget=local_token_budget if plan.kind == "local" else skill_token_budget)
        result.append(layout_episode(rec, env_name, chat, max_total_tokens=max_total_tokens, skill_sections=insert))
    return result


def _insert_section(messages: list[dict], task: str, scope: str, *, plan: SkillPlan, budget: int, position: str,
                    tokenizer: Any) -> list[dict]:
    """A Global as the rollouts insert it (``skills.inject.global_messages``), a Local skill as the teacher's
    ``## Hindsight skill`` section (``SkillLifecycle.teacher_messages`` without a Global)."""
    if plan.kind == "global":
        return global_messages(messages, plan.text, task=task, budget_tokens=budget, position=position,
                               tokenizer=tokenizer)
    return insert_sections(messages, [skill_section(LOCAL_HEADER, plan.text, budget, tokenizer)], task=task,
                           position=position)


# ---------------------------------------------------------------------- training
def clone(model: Any, episodes: Sequence[ClonedEpisode], *, steps: int, batch_size: int, learning_rate: float,
          seed: int = 0, pad_token_id: int = 0, workers: int = 1, model_dir: Any = None, threads: int | None = None,
          on_step: Callable[[int, float], None] | None = None, resume: dict[str, Any] | None = None,
          checkpoint_every: int = 0, on_checkpoint: Callable[[dict[str, Any]], None] | None = None
          ) -> dict[str, Any]:
    """Cross-entropy on the policy tokens of ``episodes`` (:func:`cloning_loss`) for exactly ``steps`` optimizer
    steps: the budget is in steps only (never wall time), so the result does not depend on the machine's load.

    Batches are drawn with a seeded shuffle. Each step's gradient is the sum, in batch order, of the episodes'
    :func:`episode_gradient` (one unpadded episode at a time), then clipped to norm 1 and applied with AdamW.
    With ``workers`` > 1 the episodes' gradients are computed by that many worker processes
    (``warmstart.workers``, each with ``threads`` torch threads, default this process's, the model loaded from
    ``model_dir``); the
    trained weights are bit-for-bit those of ``workers=1`` (a test checks it), so the worker count is a speed
    setting only: on 2 cores two single-threaded workers clone about twice as fast as one process, and a busy
    core slows a worker down without stalling the others.

    Every ``checkpoint_every`` steps (0: never; not after the last) ``on_checkpoint(state)`` receives the whole
    cloning state (:func:`clone_state`: weights, AdamW and schedule state, the shuffle's generator, order and
    cursor, the losses so far); ``clone(..., resume=state)`` continues from it and ends with the weights of an
    uninterrupted run, bit for bit (a test checks it). Returns ``{"steps", "loss_first", "loss_last",
    "seconds", "workers", "resumed_from"}``.
    """

    if not episodes:
        raise ValueError("no expert episodes to clone: the warm start needs at least one game")
    check("workers", workers, kind="int", lo=1)
    if workers > 1 and model_dir is None:
        raise ValueError("clone(workers>1) needs model_dir: the folder the workers load the model's architecture "
                         "from (pass workers=1 to clone in this process)")
    gen = torch.Generator().manual_seed(seed)
    params = list(model.parameters())
    optim = torch.optim.AdamW(params, lr=learning_rate, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        optim, lambda k: min(1.0, (k + 1) / max(1, steps // 20)) * max(0.05, 1.0 - k / max(1, steps)))
    first, losses, order, cursor, seconds_before = 1, [], [], 0, 0.0
    if resume is not None:
        _restore(resume, steps=steps, batch_size=batch_size, model=model, optim=optim, sched=sched, gen=gen)
        first, losses, order = int(resume["step"]) + 1, list(resume["losses"]), list(resume["order"])
        cursor, seconds_before = int(resume["cursor"]), float(resume["seconds"])
    model.train()
    pool = ClonePool(model_dir, episodes, workers=workers, threads=threads or torch.get_num_threads(),
                     pad_token_id=pad_token_id) if workers > 1 and first <= steps else None
    start = time.time()
    try:
        for step in range(first, steps + 1):
            if cursor + batch_size > len(order):
                order, cursor = torch.randperm(len(episodes), generator=gen).tolist(), 0
            indices = order[cursor:cursor + batch_size]
            cursor += batch_size
            count = policy_tokens([episodes[i] for i in indices])
            if pool is not None:
                results = pool.gradients(flat_parameters(model), indices, count)
            else:
                results = [episode_gradient(model, episodes[i], count, pad_token_id) for i in indices]
            total = results[0][1].clone()
            for _, grad in results[1:]:
                total += grad
            offset = 0
            for p in params:
                p.grad = total[offset:offset + p.numel()].view_as(p).clone()
                offset += p.numel()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optim.step()
            sched.step()
            optim.zero_grad(set_to_none=True)
            losses.append(sum(nll for nll, _ in results) / count)
            if on_step is not None:
                on_step(step, losses[-1])
            if on_checkpoint is not None and checkpoint_every and step % checkpoint_every == 0 and step < steps:
                on_checkpoint(clone_state(step=step, steps=steps, batch_size=batch_size, model=model, optim=optim,
                                          sched=sched, gen=gen, order=order, cursor=cursor, losses=losses,
                                          seconds=seconds_before + time.time() - start))
    finally:
        if pool is not None:
            pool.close()
    model.eval()
    window = max(1, min(10, len(losses) // 5 or 1))
    return {"steps": len(losses), "loss_first": sum(losses[:window]) / window if losses else None,
            "loss_last": sum(losses[-window:]) / window if losses else None,
            "seconds": round(seconds_before + time.time() - start, 2), "workers": workers,
            "resumed_from": first - 1 if resume is not None else None}


def clone_state(*, step: int, steps: int, batch_size: int, model: Any, optim: Any, sched: Any, gen: Any,
                order: Sequence[int], cursor: int, losses: Sequence[float], seconds: float) -> dict[str, Any]:
    """Everything :func:`clone` needs to continue after ``step`` exactly as if it had not stopped (tensors and
    plain values only, so ``torch.load(..., weights_only=True)`` reads it back), copied so that later steps do not
    change it."""
    return {"step": int(step), "steps": int(steps), "batch_size": int(batch_size),
            "model": {k: v.detach().clone() for k, v in model.state_dict().items()},
            # copies: the optimizer's state_dict holds its live moment tensors, which the next step updates
            "optimizer": copy.deepcopy(optim.state_dict()), "scheduler": copy.deepcopy(sched.state_dict()),
            "generator": gen.get_state(),
            "order": [int(i) for i in order], "cursor": int(cursor), "losses": [float(x) for x in losses],
            "seconds": float(seconds)}


def _restore(state: dict[str, Any], *, steps: int, batch_size: int, model: Any, optim: Any, sched: Any,
             gen: Any) -> None:
    """Load a :func:`clone_state` into a fresh cloning loop, refusing one of another budget or batch size."""
    if int(state["steps"]) != steps or int(state["batch_size"]) != batch_size:
        raise ValueError(f"clone(resume=...): the checkpoint was taken for steps={state['steps']}, batch_size="
                         f"{state['batch_size']}, this run has steps={steps}, batch_size={batch_size}")
    if not 0 < int(state["step"]) <= steps:
        raise ValueError(f"clone(resume=...): checkpoint step {state['step']} is outside 1..{steps}")
    model.load_state_dict(state["model"])
    optim.load_state_dict(state["optimizer"])
    sched.load_state_dict(state["scheduler"])
    gen.set_state(state["generator"])
