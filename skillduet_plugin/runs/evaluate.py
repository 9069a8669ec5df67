"""The controlled evaluation of a trained model on a fixed panel (the paper's Table 3 protocol).

The same weights are played greedily (deterministic) on the same panel under three prompt conditions: no
Global, a length-matched neutral text in the Global's place (same token count per scope, content-free,
deterministic), and the learned Global from the run's skill bank. Success is reported overall, per task type
(ALFWorld) and as the mean of the per-type rates (``avg``); WebShop adds the mean score.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from tqdm.auto import tqdm

from skillduet_plugin.config import SkillDuetConfig
from skillduet_plugin.core.conversation import ChatTokenizer
from skillduet_plugin.core.seeding import seeded_torch_rng
from skillduet_plugin.envs.registry import env_spec
from skillduet_plugin.rollout.choice import hf_choice_fn
from skillduet_plugin.rollout.collector import hf_generate_fn, run_episodes
from skillduet_plugin.runs.environment import make_pool
from skillduet_plugin.skills.budget import count_tokens, truncate_lines
from skillduet_plugin.skills.inject import global_messages
from skillduet_plugin.skills.types import GlobalSkills

CONDITIONS = ("none", "neutral", "learned")
CONDITION_LABELS = {"none": "None", "neutral": "Length-matched neutral", "learned": "Learned Global"}

# Content-free filler: says nothing about any task, environment, object or action.
_NEUTRAL_SENTENCES = ("This line is neutral filler text.", "It carries no advice of any kind.",
                      "It is here only to fill space.", "Nothing in it refers to the task.")


def neutral_text(n_tokens: int, tokenizer: Any = None) -> str:
    """Deterministic content-free text of exactly ``n_tokens`` tokens under ``tokenizer`` when reachable
    (whitespace words without a tokenizer). Lines of fixed filler sentences, cut word by word, then padded
    with single ``.`` characters for the last token or two."""
    if n_tokens <= 0:
        return ""
    words: list[tuple[str, str]] = []  # (separator, word)
    k = 0
    while len(words) < 4 * n_tokens + 8:
        sentence = _NEUTRAL_SENTENCES[k % len(_NEUTRAL_SENTENCES)].split(" ")
        words += [("\n- " if i == 0 and k else ("- " if i == 0 else " "), w) for i, w in enumerate(sentence)]
        k += 1
    text = ""
    for sep, word in words:
        candidate = text + sep + word
        if count_tokens(candidate, tokenizer) > n_tokens:
            break
        text = candidate
    count = count_tokens(text, tokenizer)
    while count < n_tokens:
        for pad in (" .", ".", "\n.", " -", "-"):  # some pads merge with what precedes them: try the next
            grown = count_tokens(text + pad, tokenizer)
            if count < grown <= n_tokens:
                text, count = text + pad, grown
                break
        else:
            break
    return text


@dataclass
class GlobalCondition:
    """Lifecycle-like prompt builder for one evaluation condition (what ``run_episodes`` calls).

    ``none`` leaves prompts alone; ``learned`` inserts the bank's current Global of the episode's scope exactly
    as training did (``SkillLifecycle.student_messages``); ``neutral`` inserts, with the same injector
    (``skills.inject.global_messages``), a neutral text with as many tokens as that (budget-truncated) Global.
    Scopes are the run's (``config.scope``, resolved by the episode engine).
    """

    mode: str
    lifecycle: Any = None

    @property
    def config(self) -> Any:
        """The run's method settings (scope, budget, position), read by the episode engine."""
        return getattr(self.lifecycle, "config", None)

    def global_for(self, scope: str):

        if self.mode == "none" or self.lifecycle is None:
            return GlobalSkills(scope=scope, version=None, text="")
        return self.lifecycle.global_for(scope)

    def learned_text(self, scope: str) -> str:
        """The learned Global of ``scope`` as it is inserted (cut to the skill token budget)."""
        g = self.global_for(scope)
        cfg = self.lifecycle.config
        return truncate_lines(g.text, cfg.skill_token_budget, self.lifecycle.tokenizer)[0] if g.text else ""

    def student_messages(self, prompt_messages: list[dict[str, str]], *, task: str, scope: str,
                         **_: Any) -> list[dict[str, str]]:
        if self.mode == "none" or self.lifecycle is None:
            return [dict(m) for m in prompt_messages]
        if self.mode == "learned":
            return self.lifecycle.student_messages(prompt_messages, task=task, scope=scope)

        cfg, tok = self.lifecycle.config, self.lifecycle.tokenizer
        text = neutral_text(count_tokens(self.learned_text(scope), tok), tok)
        return global_messages(prompt_messages, text, task=task, budget_tokens=cfg.skill_token_budget,
                               position=cfg.skill_position, tokenizer=tok)


def episode_limits(config: Any) -> dict[str, Any]:
    """A run config's episode settings as :func:`play_panel` takes them: env, turn and token limits, action
    selection (every evaluation of a run plays its episodes as the run's rollouts did)."""
    return dict(env_name=config.env, max_turns=config.max_turns, max_new_tokens=config.max_new_tokens_per_turn,
                max_total_tokens=config.max_total_tokens, action_selection=config.action_mode)


def eval_lifecycle(bank_path: str, method: SkillDuetConfig, tokenizer: Any, *, use_global: bool = True) -> Any:
    """A read-only lifecycle over a run's bank, inserting the Global like the run did (its budget, position
    and scope), whatever the run's method was; ``use_global=False``: no Global in any prompt (a Local skill
    alone, as the teacher RL started from saw it)."""
    from skillduet_plugin.skills.lifecycle import SkillLifecycle  # lazy: imports torch

    cfg = SkillDuetConfig(skill_token_budget=method.skill_token_budget, skill_position=method.skill_position,
                          scope=method.scope, max_skill_chars=method.max_skill_chars, use_global=use_global,
                          local_skill_token_budget=method.local_skill_token_budget)
    return SkillLifecycle(cfg, bank_path, tokenizer=tokenizer, write=False)


def summarize(episodes: Sequence[Any], env_name: str) -> dict[str, Any]:
    """Success overall and per task type, ``avg`` (mean of the per-type rates), mean score, counts; per task
    (``outcomes``, ``scores``) the mean over that task's episodes."""
    by_type: dict[str, list[bool]] = {}
    for ep in episodes:  # the task type, whatever the run's scope key
        by_type.setdefault(str(getattr(ep, "task_type", "") or ep.scope), []).append(bool(ep.won))
    n = max(1, len(episodes))
    per_type = {t: sum(v) / len(v) for t, v in sorted(by_type.items())}
    won: dict[str, list[float]] = {}
    scored: dict[str, list[float]] = {}
    for ep in episodes:  # a task played several times (sampled evaluation): its mean
        won.setdefault(str(ep.task_id), []).append(float(bool(ep.won)))
        scored.setdefault(str(ep.task_id), []).append(float(ep.score))
    result = {"success": sum(bool(ep.won) for ep in episodes) / n,
              "avg": sum(per_type.values()) / len(per_type) if per_type else 0.0,
              "per_type": per_type, "per_type_n": {t: len(v) for t, v in sorted(by_type.items())},
              "score": sum(float(ep.score) for ep in episodes) / n, "episodes": len(episodes),
              "errors": sum(ep.error is not None for ep in episodes),
              # per-task results in panel order: bootstrap intervals resample them (``skillduet study``)
              "outcomes": {t: sum(v) / len(v) for t, v in won.items()},
              "scores": {t: sum(v) / len(v) for t, v in scored.items()},
              "task_types": {str(ep.task_id): str(ep.scope) for ep in episodes},
              "invalid_action_rate": sum(ep.invalid_actions for ep in episodes) /
              max(1, sum(ep.num_turns for ep in episodes)),
              "turns": sum(ep.num_turns for ep in episodes) / n}
    if not env_spec(env_name).report.per_type_report:
        result.pop("per_type_n")
    return result


def play_panel(model: Any, tokenizer: Any, task_ids: Sequence[str], *, env_name: str, pool: Any,
               condition: GlobalCondition, max_turns: int, max_new_tokens: int, max_total_tokens: int,
               action_selection: str, batch_size: int = 64, do_sample: bool = False,
               temperature: float = 1.0, student_fns: Sequence[Any] | None = None) -> list[Any]:
    """One episode per entry of ``task_ids`` under ``condition`` (all in lockstep), greedy unless ``do_sample``
    (then sampled at ``temperature`` from torch's global generator, as in the rollouts); ``action_selection=
    "choose"`` picks among the admissible actions by their scores instead of generating. ``student_fns``: per
    episode, the first prompt's builder instead of the condition's (a task's Local skill)."""
    import torch  # lazy: torch

    chat = ChatTokenizer(tokenizer)
    was_training = model.training
    model.eval()
    try:
        generate = hf_generate_fn(model, chat, do_sample=do_sample, temperature=temperature, batch_size=batch_size)
        choose = hf_choice_fn(model, chat, do_sample=do_sample,
                              temperature=temperature) if action_selection == "choose" else None
        with torch.no_grad():
            return run_episodes(list(task_ids), env_name=env_name, pool=pool, generate_fn=generate, chat=chat,
                                lifecycle=None if condition.mode == "none" else condition, max_turns=max_turns,
                                max_new_tokens=max_new_tokens, max_total_tokens=max_total_tokens,
                                action_selection=action_selection, choose_fn=choose, student_fns=student_fns)
    finally:
        model.train(was_training)


def evaluate_conditions(model: Any, tokenizer: Any, task_ids: Sequence[str], *, env_name: str, pool: Any,
                        lifecycle: Any = None, conditions: Sequence[str] = CONDITIONS, max_turns: int,
                        max_new_tokens: int, max_total_tokens: int, action_selection: str,
                        samples: int = 0, seed: int = 0, temperature: float = 1.0, log=print) -> dict[str, Any]:
    """Play the panel under each condition; conditions that need a Global are skipped (and listed under
    ``skipped``) when the bank holds none for the panel's scopes. With ``samples`` > 0 the policy is also
    sampled without a Global: ``samples`` episodes per task at ``temperature``, under ``results["sampled"]`` (per
    task the mean of its episodes), from a generator seeded with ``seed`` inside a forked RNG, so it is the same
    on every run and leaves the caller's random state (and so the training that follows) untouched; when the
    learned Global was measured, the policy is sampled with it too, with the same seed and samples, under
    ``results["sampled_learned"]`` (the run as deployed)."""
    results: dict[str, Any] = {"conditions": {}, "skipped": {},
                               "decoding": "greedy" if action_selection == "generate" else "greedy choice",
                               "panel_size": len(task_ids)}
    # a bar per panel on a terminal (tqdm disables itself when stderr is not one: logs and tests stay clean)
    for mode in tqdm(conditions, desc=f"eval ({len(task_ids)} tasks)", unit="condition", leave=False,
                     disable=None, dynamic_ncols=True):
        if mode not in CONDITIONS:
            raise ValueError(f"condition={mode!r} is invalid: allowed values are {', '.join(CONDITIONS)}")
        condition = GlobalCondition(mode, lifecycle)
        if mode != "none" and (lifecycle is None or not any(v.version is not None for v in _globals(lifecycle))):
            results["skipped"][mode] = "no learned Global in the skill bank"
            continue
        t0 = time.time()
        episodes = play_panel(model, tokenizer, task_ids, env_name=env_name, pool=pool, condition=condition,
                              max_turns=max_turns, max_new_tokens=max_new_tokens, max_total_tokens=max_total_tokens,
                              action_selection=action_selection)
        summary = summarize(episodes, env_name)
        summary["seconds"] = round(time.time() - t0, 1)
        if mode != "none":
            scopes = sorted({str(ep.scope) for ep in episodes})
            summary["global_tokens"] = {s: count_tokens(condition.learned_text(s), lifecycle.tokenizer)
                                        for s in scopes}
            summary["global_versions"] = {s: condition.global_for(s).version for s in scopes}
        results["conditions"][mode] = summary
        log(f"eval [{CONDITION_LABELS[mode]}]: success {summary['success']:.3f} on {len(episodes)} tasks "
            f"({summary['seconds']}s)")
    if samples > 0:
        limits = dict(max_turns=max_turns, max_new_tokens=max_new_tokens, max_total_tokens=max_total_tokens,
                      action_selection=action_selection)
        results["sampled"] = sampled_summary(model, tokenizer, task_ids, env_name=env_name, pool=pool,
                                             samples=samples, seed=seed, temperature=temperature, **limits)
        r = results["sampled"]
        log(f"eval [{CONDITION_LABELS['none']}, sampled x{samples}]: success {r['success']:.3f} on "
            f"{len(task_ids)} tasks ({r['seconds']}s)")
        if "learned" in results["conditions"]:  # the policy as deployed: sampled with its learned Global
            results["sampled_learned"] = r = sampled_summary(
                model, tokenizer, task_ids, env_name=env_name, pool=pool, samples=samples, seed=seed,
                temperature=temperature, condition=GlobalCondition("learned", lifecycle), **limits)
            log(f"eval [{CONDITION_LABELS['learned']}, sampled x{samples}]: success {r['success']:.3f} on "
                f"{len(task_ids)} tasks ({r['seconds']}s)")
    return results


def sampled_summary(model: Any, tokenizer: Any, task_ids: Sequence[str], *, env_name: str, pool: Any, samples: int,
                    seed: int, temperature: float, student_fns: Sequence[Any] | None = None,
                    condition: GlobalCondition | None = None, **limits: Any) -> dict[str, Any]:
    """:func:`summarize` of :func:`sampled_episodes`."""
    t0 = time.time()
    episodes = sampled_episodes(model, tokenizer, task_ids, env_name=env_name, pool=pool, samples=samples, seed=seed,
                                temperature=temperature, student_fns=student_fns, condition=condition, **limits)
    summary = summarize(episodes, env_name)
    summary.update(seconds=round(time.time() - t0, 1), samples=samples, temperature=temperature)
    return summary


def sampled_episodes(model: Any, tokenizer: Any, task_ids: Sequence[str], *, env_name: str, pool: Any,
                     samples: int, seed: int, temperature: float, student_fns: Sequence[Any] | None = None,
                     condition: GlobalCondition | None = None, **limits: Any) -> list[Any]:
    """``samples`` sampled episodes per task (no Global unless ``condition``; ``student_fns``: per task, its
    prompt builder), drawn from torch's generator seeded with ``seed`` inside a forked RNG: the same episodes on
    every call, and the caller's random state is left as it was."""
    with seeded_torch_rng(seed):
        fns = None if student_fns is None else [fn for fn in student_fns for _ in range(samples)]
        return play_panel(model, tokenizer, [t for t in task_ids for _ in range(samples)], env_name=env_name,
                          pool=pool, condition=condition or GlobalCondition("none", None), do_sample=True,
                          temperature=temperature, student_fns=fns, **limits)


def _globals(lifecycle: Any) -> list[Any]:
    return [lifecycle.bank.current_global(s) for s in lifecycle.bank.scopes()]


def format_table(results: dict[str, Any], env_name: str, title: str = "") -> str:
    """A Markdown table: one row per condition; the columns are the task types, ALL and Avg (%) (ALFWorld), or
    Score and Succ. (%) for environments that register ``per_type_report=False`` (WebShop)."""
    spec = env_spec(env_name)
    rows = results.get("conditions", {})
    lines = [f"### {title}", ""] if title else []
    if not spec.report.per_type_report:
        lines += ["| Global | Score | Succ. |", "|---|---|---|"]
        for mode, r in rows.items():
            lines.append(f"| {CONDITION_LABELS[mode]} | {100 * r['score']:.2f} | {100 * r['success']:.2f} |")
    else:
        order = spec.report.scope_order
        types = sorted({t for r in rows.values() for t in r.get("per_type", {})},
                       key=lambda t: (order.index(t), t) if t in order else (len(order), t))
        lines += ["| Global | " + " | ".join(types + ["ALL", "Avg"]) + " |",
                  "|---|" + "---|" * (len(types) + 2)]
        for mode, r in rows.items():
            cells = [f"{100 * r['per_type'][t]:.2f}" if t in r["per_type"] else "-" for t in types]
            cells += [f"{100 * r['success']:.2f}", f"{100 * r['avg']:.2f}"]
            lines.append(f"| {CONDITION_LABELS[mode]} | " + " | ".join(cells) + " |")
    for mode, why in results.get("skipped", {}).items():
        lines.append(f"\n{CONDITION_LABELS[mode]}: skipped ({why}).")
    lines.append(f"\nPanel: {results.get('panel', '?')}, {results.get('panel_size', '?')} tasks, "
                 f"{results.get('decoding', 'greedy')} decoding.")
    return "\n".join(lines) + "\n"


def evaluate_panel(model: Any, tokenizer: Any, config: Any, task_ids: Sequence[str], bank_path: Any, *,
                   conditions: Sequence[str] = CONDITIONS, log=print, split: str | None = None,
                   samples: int = 0) -> dict[str, Any]:
    """:func:`evaluate_conditions` for a run config: the run's Global (from ``bank_path`` if it exists), an
    environment pool for the panel (``split``: the tasks' split when they are not the panel's), the run's turn
    limits and action selection (``samples``: :func:`evaluate_conditions`, at the run's temperature and seed);
    everything closed after."""

    bank = Path(bank_path) if bank_path else None
    lifecycle = eval_lifecycle(str(bank), config.method_config(), tokenizer) if bank and bank.exists() else None
    pool = make_pool(config, split or config.panel)
    try:
        return evaluate_conditions(model, tokenizer, task_ids, pool=pool, lifecycle=lifecycle,
                                   conditions=conditions, samples=samples, seed=config.seed,
                                   temperature=config.temperature, log=log, **episode_limits(config))
    finally:
        pool.close()
        if lifecycle is not None:
            lifecycle.close()
