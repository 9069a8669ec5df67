"""``skillduet train`` on TRL, top to bottom: resolve the model, warm-start it (tiny models), measure the panel,
run SkillDuetGRPOTrainer with a metrics recorder and a progress bar, save, measure again, plot.

Every artefact lands in the run directory; the function returns its path (the CLI prints it last).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.trainer_callback import PrinterCallback, ProgressCallback

from skillduet_plugin.config import ConfigError
from skillduet_plugin.core.artefacts import replace_file
from skillduet_plugin.core.cpu_kernels import cpu_kernels
from skillduet_plugin.core.episode import episode_settings
from skillduet_plugin.envs.registry import env_spec
from skillduet_plugin.runs.config import RunConfig, dump_yaml
from skillduet_plugin.runs.environment import data_identity, env_kwargs, interleave_by_type, make_env
from skillduet_plugin.runs.evaluate import evaluate_panel
from skillduet_plugin.runs.plots import plot_run
from skillduet_plugin.runs.recorder import RunRecorder
from skillduet_plugin.runs.rundir import (CONFIG_FILE, MetricsWriter, RunDir, cache_dir, read_metrics, resolve_model,
                                          write_json)
from skillduet_plugin.runs.summary import panel_summary, run_summary, summary_line, training_line, training_summary
from skillduet_plugin.runs.teacher_eval import measure_teachers, teacher_line
from skillduet_plugin.warmstart.cache import warm_start_model
from skillduet_plugin.warmstart.workers import POOL_MIN_STEPS, default_workers

OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "TRL_EXPERIMENTAL_SILENCE": "1",
               "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "disabled"}


def device_settings(config: RunConfig) -> dict[str, Any]:
    """GRPOConfig keywords for the device: bf16 on CUDA when available, CPU-safe fp32 settings otherwise."""

    cuda = torch.cuda.is_available() and config.device != "cpu"  # device=cuda without CUDA: refused at load
    bf16 = cuda and (config.precision in ("auto", "bf16")) and torch.cuda.is_bf16_supported()
    settings: dict[str, Any] = {"bf16": bool(bf16), "fp16": False, "use_cpu": not cuda,
                                "gradient_checkpointing": False, "use_vllm": False,
                                "dataloader_pin_memory": cuda, "report_to": "none"}
    return settings


def torch_threads(config: RunConfig) -> int:
    """The torch intra-op thread count of a run: ``threads`` when set, else one per two CPU cores (at least one)
    on CPU, torch's default on a GPU. Fixed by the config and the machine, never by its load, so the numbers do
    not change with the load; and small enough that a busy CPU slows the run down instead of stalling it:
    OpenMP threads wait for each other at every operator, so when another process takes one of their cores every
    operator waits for the descheduled thread (measured in ``bench/threads.py``, docs/benchmarks.md)."""

    if config.threads:
        return config.threads
    if torch.cuda.is_available() and config.device != "cpu":
        return torch.get_num_threads()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // 2)


def set_threads(config: RunConfig) -> int:
    """Apply :func:`torch_threads`; returns the count."""

    threads = torch_threads(config)
    torch.set_num_threads(threads)
    return threads


def grpo_args(config: RunConfig, run: RunDir) -> Any:
    """The SkillDuetGRPOConfig of a run: one generation batch of ``tasks_per_step`` tasks x G rollouts per
    optimizer step, in ``micro_batch`` slices accumulated into that one step (none by default), beta 0 (no
    reference model), log every step."""
    from skillduet_plugin.integrations.trl import SkillDuetGRPOConfig  # lazy: imports trl

    batch = config.tasks_per_step * config.num_generations
    slices = batch // (config.micro_batch or batch)
    kwargs: dict[str, Any] = dict(
        output_dir=str(run.checkpoints), skill_bank_dir=str(run.root), max_steps=config.steps,
        per_device_train_batch_size=batch // slices, gradient_accumulation_steps=slices,
        num_generations=config.num_generations, steps_per_generation=slices, num_iterations=1,
        learning_rate=config.learning_rate, beta=0.0,
        temperature=config.temperature, seed=config.seed, data_seed=config.seed, logging_steps=1,
        max_completion_length=config.max_total_tokens, save_strategy="steps" if config.save_steps else "no",
        save_steps=config.save_steps or 500, save_only_model=False, disable_tqdm=True,
        skillduet=config.method_config().to_dict(), env_name=config.env,
        env_kwargs=env_kwargs(config, config.train_split), env_workers=config.env_workers,
        teacher_check_samples=config.teacher_check_samples, opd_update_share=config.opd_update_share,
        lr_scheduler_type="constant",
        **dataclasses.asdict(episode_settings(config, action_selection=config.action_mode)))
    kwargs.update(device_settings(config))
    kwargs.update(config.trl)  # the user's own GRPOConfig keywords win
    return SkillDuetGRPOConfig(**kwargs)


def train_tasks(config: RunConfig) -> list[str]:
    """The training tasks: the first ``train_tasks`` of the split taken round-robin over task types (so a
    short list still covers every type), all of them when ``train_tasks`` is 0."""
    env = make_env(config, config.train_split)
    try:
        return interleave_by_type(env, list(env.tasks), config.train_tasks)
    finally:
        env.close()


def training_eval_tasks(config: RunConfig, train_ids: list[str]) -> list[str]:
    """The RL training tasks measured before and after RL: the first ``eval_training_tasks`` of them."""
    return train_ids[:config.eval_training_tasks]


def panel(config: RunConfig, split: str | None = None, limit: int | None = None) -> list[str]:
    """The fixed evaluation panel of a run (round-robin over task types, deterministic)."""
    split = split or config.panel
    env = make_env(config, split)
    try:
        return interleave_by_type(env, list(env.tasks), config.eval_tasks if limit is None else limit)
    finally:
        env.close()


def load_model(model_dir: Path, config: RunConfig) -> tuple[Any, Any]:
    """``(model, tokenizer)`` from a local folder, in bf16 on CUDA when the run uses it, else fp32 on CPU."""

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    dtype = torch.bfloat16 if device_settings(config)["bf16"] else torch.float32
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
    if not device_settings(config)["use_cpu"]:
        model.to("cuda")
    return model, tokenizer


def measure(model: Any, tokenizer: Any, config: RunConfig, tasks: list[str], run: RunDir, *, label: str,
            conditions: tuple[str, ...], log: Callable[[str], None], split: str | None = None) -> dict[str, Any]:
    """Success on the panel (or on ``tasks`` of ``split``) under ``conditions`` (greedy), and sampled
    (``RunConfig.samples_for``) without a Global and, when ``conditions`` hold the learned Global, with it;
    written to ``eval/<label>.json``."""

    results = evaluate_panel(model, tokenizer, config, tasks, run.bank, conditions=conditions, log=log,
                             split=split, samples=config.samples_for(split))
    results["panel"] = split or config.panel
    write_json(run.eval_dir / f"{label}.json", results)
    return results


def resume_point(run_dir: str | os.PathLike) -> Path:
    """The last complete checkpoint of a run directory (one with its skill-bank snapshot), or a ConfigError
    naming the folder and the fix. Checked before any work starts."""
    from skillduet_plugin.integrations.trl.callback import SNAPSHOT_DIRNAME  # lazy: imports trl

    run = Path(run_dir).expanduser()
    if not (run / CONFIG_FILE).is_file():
        raise ConfigError(f"--resume {str(run_dir)!r} is invalid: it holds no {CONFIG_FILE}; pass the run directory "
                          "printed by `skillduet train`")
    checkpoints = sorted((p for p in (run / "checkpoints").glob("checkpoint-*")
                          if p.name.split("-")[-1].isdigit() and (p / "trainer_state.json").is_file()
                          and (p / SNAPSHOT_DIRNAME / "skill_bank.sqlite").is_file()),
                         key=lambda p: int(p.name.split("-")[-1]))
    if not checkpoints:
        raise ConfigError(f"--resume {str(run_dir)!r}: no complete checkpoint under {run / 'checkpoints'} (the "
                          "run stopped before its first save; save_steps sets how often it saves): start it again")
    return checkpoints[-1]


def _keep_metrics_until(path: Path, step: int) -> None:
    """Drop the records of steps after ``step`` (made by the stopped run after its last checkpoint)."""
    if not path.is_file():
        return
    kept = [r for r in read_metrics(path) if int(r.get("step", 0) or 0) <= step and r.get("event") != "summary"]
    replace_file(path, lambda tmp: tmp.write_text("".join(json.dumps(r) + "\n" for r in kept)))


def run_training(config: RunConfig, *, log: Callable[[str], None] | None = None,
                 resume: str | os.PathLike | None = None) -> Path:
    """Run one training run end to end; returns the run directory. ``resume``: a stopped run's directory,
    continued from its last checkpoint (model, optimizer, RNG, and the skill bank of that step)."""
    for key, value in OFFLINE_ENV.items():
        os.environ.setdefault(key, value)
    run, checkpoint = _open_run(config, resume)
    log_file = run.log.open("a")

    def say(msg: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        (log or (lambda m: print(m, file=sys.stderr, flush=True)))(line)
        log_file.write(line + "\n")
        log_file.flush()

    t_start = time.time()
    threads = set_threads(config)  # before the warm start: its key names the count, and it must not stall either
    timings: dict[str, float] = {}
    try:
        torch.manual_seed(config.seed)
        say(f"run directory {run.root} ({threads} torch thread{'s' if threads > 1 else ''}, {cpu_kernels()} CPU "
            "kernels)")
        t0 = time.time()
        base = resolve_model(config.model, seed=config.seed, env=config.env)
        model_dir, warm_info = _warm_start(config, base, say) if config.warm_start_enabled else (base, None)
        timings["time/warm_start_s"] = time.time() - t0

        model, tokenizer = load_model(model_dir, config)
        t0 = time.time()
        tasks = _Tasks.of(config)
        say(f"{config.env}: {len(tasks.train)} training tasks ({config.train_split}), panel of {len(tasks.panel)} "
            f"({config.panel}); method {config.method}")
        before = _measure(model, tokenizer, config, tasks, run, say, "before", resuming=checkpoint is not None)
        timings["time/eval_before_s"] = time.time() - t0

        t0 = time.time()
        trainer = _train(config, run, model, tokenizer, tasks.train, checkpoint, say)
        timings["time/train_s"] = time.time() - t0
        trainer.save_model(str(run.final_model))
        tokenizer.save_pretrained(str(run.final_model))

        t0 = time.time()
        after, teacher = (None, None), None
        if config.eval_after:
            model = trainer.accelerator.unwrap_model(trainer.model)
            after = _measure(model, tokenizer, config, tasks, run, say, "after")
            if config.eval_teacher and tasks.train_eval and config.method_config().extract_local:
                teacher = measure_teachers(config, run, model, tokenizer, tasks.train_eval,
                                           lambda: load_model(model_dir, config)[0], (before[1], after[1]),
                                           _tagged(say, "training tasks"))
        timings["time/eval_after_s"] = time.time() - t0
        timings["time/total_s"] = time.time() - t_start
        _summarise(config, run, tasks, before, after, warm_info, timings, tokenizer, say, teacher)
    finally:
        log_file.close()
    return run.root


def _open_run(config: RunConfig, resume: str | os.PathLike | None) -> tuple[RunDir, Path | None]:
    """The run directory (a new one, or the stopped run's with its metrics cut back to the checkpoint) and the
    checkpoint to resume from (None for a fresh run)."""
    checkpoint = resume_point(resume) if resume is not None else None
    if checkpoint is not None:
        run = RunDir.open(resume)
        _keep_metrics_until(run.metrics, int(checkpoint.name.split("-")[-1]))
    else:
        run = RunDir.create(config.output_dir, config.name)
        dump_yaml(config.resolved_dict(), run.config)
    return run, checkpoint


@dataclass(frozen=True)
class _Tasks:
    """The tasks of a run: the panel, the RL training tasks and those of them measured before and after."""

    panel: list[str]
    train: list[str]
    train_eval: list[str]

    @classmethod
    def of(cls, config: RunConfig) -> "_Tasks":
        panel_ids = panel(config)  # the panel's env first, then the training split's, as they are built in order
        train = train_tasks(config)
        return cls(panel_ids, train, training_eval_tasks(config, train))


def _measure(model: Any, tokenizer: Any, config: RunConfig, tasks: _Tasks, run: RunDir, say: Callable[[str], None],
             when: str, *, resuming: bool = False) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The panel and the measured training tasks, ``when`` = ``"before"`` RL (reused from a stopped run's files
    when resuming) or ``"after"`` it (with the learned Global as a second condition, greedy and sampled, when the
    method builds one)."""
    on_train = dict(log=_tagged(say, "training tasks"), split=config.train_split)
    if when == "before":
        wanted = config.eval_before
        panel_result = _before(run, "before", resuming, wanted,
                               lambda: measure(model, tokenizer, config, tasks.panel, run, label="before",
                                               conditions=("none",), log=say))
        train_result = _before(run, "before_train", resuming, wanted and bool(tasks.train_eval),
                               lambda: measure(model, tokenizer, config, tasks.train_eval, run, label="before_train",
                                               conditions=("none",), **on_train))
        return panel_result, train_result
    conditions = ("none", "learned") if config.method_config().use_global else ("none",)
    panel_result = measure(model, tokenizer, config, tasks.panel, run, label="after", conditions=conditions, log=say)
    train_result = None
    if tasks.train_eval:
        train_result = measure(model, tokenizer, config, tasks.train_eval, run, label="after_train",
                               conditions=conditions, **on_train)
    return panel_result, train_result


def _train(config: RunConfig, run: RunDir, model: Any, tokenizer: Any, train_ids: list[str],
           checkpoint: Path | None, say: Callable[[str], None]) -> Any:
    """The TRL trainer built and run (from ``checkpoint`` when resuming), its steps recorded in the run."""
    trainer = _trainer(config, run, model, tokenizer, train_ids)
    if checkpoint is not None and int(checkpoint.name.split("-")[-1]) >= config.steps:
        # stopped after its last RL step (while evaluating): TRL would train one step more; take that step's model
        say(f"{checkpoint} is the last RL step: evaluating it (model and skill bank of that step)")
        trainer._load_from_checkpoint(str(checkpoint))
        trainer.skillduet_restore(checkpoint)
        return trainer
    recorder = RunRecorder(trainer, MetricsWriter(run.metrics), config, say)
    trainer.add_callback(recorder)
    if checkpoint is not None:
        say(f"resuming from {checkpoint} (model, optimizer, RNG and the skill bank of that step)")
    with _quiet_trainer_progress(trainer):
        trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint is not None else None)
    recorder.close()
    return trainer


def _summarise(config: RunConfig, run: RunDir, tasks: _Tasks, before: tuple, after: tuple, warm_info: Any,
               timings: dict[str, float], tokenizer: Any, say: Callable[[str], None],
               teacher: dict[str, Any] | None = None) -> None:
    """``summary.json`` (and its metrics event), the run's plots, and the printed result lines."""
    summary = run_summary(before[0], after[0], warm_info, timings)
    summary["panel"] = panel_summary(before[0], after[0], config, len(tasks.panel))
    summary["training_tasks"] = training_summary(before[1], after[1], config, len(tasks.train_eval))
    summary.update(teacher=teacher, cpu_kernels=cpu_kernels())
    MetricsWriter(run.metrics).write({"event": "summary", **summary})
    write_json(run.root / "summary.json", summary)
    plot_run(run.root, tokenizer=tokenizer)
    scored = not env_spec(config.env).report.per_type_report  # WebShop: the score too, as the paper reports both
    say(summary_line(summary, scored))
    if summary["training_tasks"]:
        say(training_line(summary["training_tasks"], scored))
    if teacher:
        say(teacher_line(teacher))


def _before(run: RunDir, label: str, resuming: bool, wanted: bool,
            compute: Callable[[], dict[str, Any]]) -> dict[str, Any] | None:
    """A before-RL measurement: the one made before a stop when resuming, else computed now when ``wanted``."""
    file = run.eval_dir / f"{label}.json"
    if resuming and file.is_file():
        return json.loads(file.read_text())
    return compute() if wanted else None


def _tagged(say: Callable[[str], None], tag: str) -> Callable[[str], None]:
    return lambda msg: say(f"{msg} [{tag}]")


def warm_start_settings(config: RunConfig) -> dict[str, Any]:
    """The keywords of ``warm_start_model`` that, with the base model, set the warm-started weights: the
    warm_start section, the episode limits, the seed and the data, not the method's settings (so that
    grpo_baseline.yaml and cpu_demo.yaml start from one model). The skill position is shared: the model must
    learn to read skills where the RL loop will put them."""
    ws = config.warm_start
    return dict(env_name=config.env, games=ws.games, expert=ws.expert, episodes_per_game=ws.episodes_per_game,
                steps=ws.steps, batch_size=ws.batch_size, learning_rate=ws.learning_rate,
                skill_fraction=ws.skill_fraction, max_turns=ws.max_turns or config.max_turns,
                max_total_tokens=config.max_total_tokens, skill_token_budget=ws.skill_token_budget,
                skill_position=config.method_config().skill_position, seed=config.seed,
                # the training split's data only when its games are cloned (warm_start.games), so that runs on
                # other games (a development split) start from the same model
                env_identity=data_identity(config, config.train_split if ws.games else ws.clone_split),
                design=ws.design,
                reading=dict(env_kwargs=env_kwargs(config, ws.clone_split), games=ws.clone_games,
                             counterfactuals=ws.counterfactuals, global_episodes=ws.global_episodes)
                if ws.design == "reading" else None)


def _warm_start(config: RunConfig, base: Path, say: Callable[[str], None]) -> tuple[Path, dict[str, Any]]:

    return warm_start_model(base, make_env=lambda n: make_env(config, config.train_split, n),
                            cache_root=cache_dir(), log=say, workers=cloning_workers(config),
                            checkpoint_steps=config.warm_start.checkpoint_steps, **warm_start_settings(config))


def cloning_workers(config: RunConfig) -> int:
    """``warm_start.workers``, or when 0 as many processes of the run's thread count as the cores hold, but one
    for a warm start of fewer than ``POOL_MIN_STEPS`` steps (spawning workers costs a few seconds, more than such
    a short warm start saves). The cloned weights are the same for any count."""

    ws = config.warm_start
    if ws.workers:
        return ws.workers
    return default_workers(torch_threads(config), ws.batch_size) if ws.steps >= POOL_MIN_STEPS else 1


def _trainer(config: RunConfig, run: RunDir, model: Any, tokenizer: Any, train_ids: list[str]) -> Any:
    from skillduet_plugin.integrations.trl import SkillDuetGRPOTrainer, task_dataset  # lazy: imports trl

    args = grpo_args(config, run)
    env = make_env(config, config.train_split)
    try:
        dataset = task_dataset(env, train_ids)
    finally:
        env.close()
    return SkillDuetGRPOTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)


@contextlib.contextmanager
def _quiet_trainer_progress(trainer: Any):
    """Our progress bar replaces transformers' own bar and log printer for the duration of ``train()``."""

    for cb in (ProgressCallback, PrinterCallback):
        trainer.remove_callback(cb)
    yield
