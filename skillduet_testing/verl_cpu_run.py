"""TEST-ONLY: run verl's real ``main_ppo`` (``fit()``) on a CPU with the tiny model, with or without SkillDuet.

Used by the real-loop CI tests and by ``recipes/cpu_tiny_alfworld.sh``. Everything is built locally (tiny
tokenizer and model, the tasks of the run's environment - generated ALFWorld games by default - or a rule-reward
arithmetic set); nothing is downloaded. The run goes through the test-only CPU platform shim and CPU rollout
backend (``skillduet_testing.verl_rollout``).

    python -m skillduet_testing.verl_cpu_run --out /tmp/skillduet_cpu [--steps 2] [--stock] [overrides...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from skillduet_plugin.core.settings import declared_default
from skillduet_plugin.integrations.verl.settings import EnvSettings
from skillduet_plugin.warmstart.tiny_model import build_tiny

REPO = Path(__file__).resolve().parents[1]

#: What makes verl 0.9.1 run on a 2-core CPU machine (see the CPU notes of docs/research on verl).
CPU_OVERRIDES = [
    "actor_rollout_ref.rollout.name=hf",  # skillduet_testing.verl_rollout
    "actor_rollout_ref.rollout.mode=async",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.agent.num_workers=1",
    "reward.num_workers=1",
    "trainer.n_gpus_per_node=1",
    "trainer.nnodes=1",
    # verl's resource check counts Ray GPUs; with the CPU platform shim the bundles are CPU bundles
    "+ray_kwargs.ray_init.num_gpus=1",
    # TransferQueue's controller and each storage unit reserve a CPU; fewer and the run hangs silently
    "ray_kwargs.ray_init.num_cpus=3",
    "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
    "actor_rollout_ref.actor.strategy=fsdp2",
    "actor_rollout_ref.ref.strategy=fsdp2",
    "++actor_rollout_ref.actor.fsdp_config.mixed_precision={param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}",
    "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
    "actor_rollout_ref.model.use_remove_padding=False",
]

#: A small GRPO step: 4 prompts x 2 samples, one mini-batch, no reference model, no validation.
TINY_OVERRIDES = [
    "algorithm.adv_estimator=grpo",
    "algorithm.use_kl_in_reward=False",
    "data.train_batch_size=4",
    "data.filter_overlong_prompts=False",
    "data.dataloader_num_workers=0",
    "actor_rollout_ref.rollout.n=2",
    "actor_rollout_ref.rollout.temperature=1.0",
    "actor_rollout_ref.actor.ppo_mini_batch_size=4",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.actor.use_kl_loss=False",
    "actor_rollout_ref.actor.entropy_coeff=0",
    "actor_rollout_ref.actor.optim.lr=1e-3",  # large on purpose: a sync that is skipped must show
    "trainer.logger=[console,file]",
    "trainer.val_before_train=False",
    "trainer.test_freq=-1",
    "trainer.total_epochs=100",
    "trainer.project_name=skillduet_cpu",
]

#: SkillDuet: 3 turns of up to 24 tokens; the environment (ALFWorld unless ``skillduet.env.name`` is overridden)
#: and the offline analyzer and synthesizer are the defaults.
SKILLDUET_OVERRIDES = [
    "trainer.plugins=[skillduet]",
    "data.max_prompt_length=1024",
    "data.max_response_length=320",
    "skillduet.env.max_turns=3",
    "skillduet.env.max_new_tokens_per_turn=24",
    "skillduet.consolidation_interval=1",
    "skillduet.global_server=skillduet_cpu_global_skills",
    "skillduet.replay_poll_interval_s=0.1",  # verl's 2-s poll would round every step's rollout up to whole polls
]

#: Greedy sampling (top_k=1 at temperature 1, so verl's log-probs keep their temperature): the rollouts depend
#: only on the weights, not on which replica served them or in what order, so runs of different sizes compare.
GREEDY_OVERRIDES = ["actor_rollout_ref.rollout.top_k=1"]


def data_parallel_overrides(workers: int) -> list[str]:
    """``workers`` actor workers (FSDP2 over gloo) and, with tensor parallel 1, as many rollout replicas.

    verl's resource check counts one Ray GPU per worker; TransferQueue's controller and storage unit each keep
    a CPU on top of one CPU bundle per worker (see :data:`CPU_OVERRIDES`)."""
    if workers < 1:
        raise ValueError(f"workers={workers}: give at least 1 actor worker")
    return [f"trainer.n_gpus_per_node={workers}", f"+ray_kwargs.ray_init.num_gpus={workers}",
            f"ray_kwargs.ray_init.num_cpus={workers + 2}"]


STOCK_OVERRIDES = ["data.max_prompt_length=64", "data.max_response_length=16",
                   f"reward.custom_reward_function.path={__file__}", "reward.custom_reward_function.name=rule_reward"]


def rule_reward(data_source: str, solution_str: str, ground_truth: str, extra_info=None, **kwargs) -> float:
    """1 for an answer containing the ground truth, else a small penalty growing with length.

    The graded penalty gives a random tiny model different rewards within a GRPO group (non-zero advantages),
    so every step really moves the weights and a skipped weight sync shows in the rollout-vs-actor gap.
    """
    if str(ground_truth) in solution_str:
        return 1.0
    return -min(len(solution_str), 64) / 64.0


def build_rule_dataset(out_dir: str | os.PathLike, n: int = 16) -> str:
    """Single-turn arithmetic prompts, scored by :func:`rule_reward`."""
    import pandas as pd  # lazy: imports numpy

    rows = []
    for i in range(n):
        a, b = i % 7 + 1, i % 5 + 2
        rows.append({"data_source": "skillduet/arithmetic",
                     "prompt": [{"role": "user", "content": f"What is {a} plus {b}? End with #### and the number."}],
                     "ability": "math", "reward_model": {"style": "rule", "ground_truth": str(a + b)},
                     "extra_info": {"index": i}})
    path = Path(out_dir) / "rule" / "train.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path)
    return str(path)


def env_of(overrides: Sequence[str]) -> str:
    """The environment a SkillDuet run plays: its ``skillduet.env.name`` override, else the setting's default."""
    for override in overrides:
        key, _, value = override.partition("=")
        if key.lstrip("+") == "skillduet.env.name":
            return value
    return declared_default(EnvSettings, "name")


def build_env_dataset(out_dir: str | os.PathLike, env_name: str, env: dict[str, str] | None = None,
                      max_train: int = 8) -> str:
    """Rows for the first ``max_train`` training tasks of ``env_name``, written by the dataset builder
    (``skillduet_plugin.integrations.verl.data``) in a process with ``env``: the run's own environment
    variables, so an environment registered by a package on the run's PYTHONPATH is found as the run finds it."""
    folder = Path(out_dir) / env_name
    cmd = [sys.executable, "-m", "skillduet_plugin.integrations.verl.data", "--env", env_name, "--out", str(folder),
           "--max-train", str(max_train)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"building the {env_name!r} dataset failed (exit {done.returncode}): {last}")
    return str(folder / "train.parquet")


def run_env(extra_pythonpath: str | None = None, **extra: str) -> dict[str, str]:
    """The subprocess environment: offline, one thread per process, the CPU shim and backend in every process."""
    from skillduet_testing.verl_rollout import cpu_rollout_env  # lazy: imports torch

    env = dict(os.environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "disabled",
                "RAY_USAGE_STATS_ENABLED": "0", "TRL_EXPERIMENTAL_SILENCE": "1", "RAY_DEDUP_LOGS": "0"})
    env.update(cpu_rollout_env(extra_pythonpath))
    env.update(extra)
    return env


def runtime_env_overrides(env: dict[str, str]) -> list[str]:
    """Pass the shim/backend variables (and PYTHONPATH, for a source checkout) to every Ray worker."""
    keys = ["VERL_PLATFORM", "VERL_ENGINE_DEVICE", "VERL_USE_EXTERNAL_MODULES", "TOKENIZERS_PARALLELISM",
            "OMP_NUM_THREADS", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "VERL_FILE_LOGGER_PATH",
            "SKILLDUET_CPU_ROLLOUT_SKIP_SYNC_AT", "PYTHONPATH", "TENSORBOARD_DIR", "WANDB_MODE", "WANDB_DIR",
            "WANDB_SILENT"]
    return [f"+ray_kwargs.ray_init.runtime_env.env_vars.{k}={json.dumps(env[k])}" for k in keys if env.get(k)]


#: The entry modules a run may start: SkillDuet's (its config holds ``trainer.plugins`` and the ``skillduet:``
#: section) and stock verl's (those keys are new to its config, so they take a ``+``).
ENTRIES = ("skillduet_plugin.main_ppo", "verl.trainer.main_ppo")


def for_entry(overrides: Sequence[str], entry: str) -> list[str]:
    """``overrides`` as ``entry`` takes them: stock verl's config has no ``trainer.plugins`` nor ``skillduet``."""
    if entry == ENTRIES[0]:
        return list(overrides)
    new = ("trainer.plugins=", "skillduet.")
    return [f"+{o}" if o.startswith(new) else o for o in overrides]


def command(model_dir: str, train_file: str, out_dir: str, *, steps: int, stock: bool, save_freq: int,
            env: dict[str, str], extra: Sequence[str] = (), entry: str = ENTRIES[0]) -> list[str]:
    """The ``python -m <entry>`` command line of one tiny CPU run."""
    if entry not in ENTRIES:
        raise ValueError(f"entry={entry!r}: expected one of {', '.join(ENTRIES)}")
    extra = for_entry(extra, entry)
    run = [sys.executable, "-m", entry, *CPU_OVERRIDES, *TINY_OVERRIDES,
           *for_entry(STOCK_OVERRIDES if stock else SKILLDUET_OVERRIDES, entry),
           f"actor_rollout_ref.model.path={model_dir}", f"data.train_files={train_file}",
           f"data.val_files={train_file}", f"trainer.total_training_steps={steps}", f"trainer.save_freq={save_freq}",
           f"trainer.default_local_dir={Path(out_dir) / 'checkpoints'}",
           f"trainer.experiment_name={'stock' if stock else 'skillduet'}",
           f"hydra.run.dir={Path(out_dir) / 'hydra'}", *runtime_env_overrides(env)]
    # an extra override replaces the default of the same key (Hydra refuses a key given twice)
    keys = {e.split("=", 1)[0].lstrip("+") for e in extra}
    return [o for o in run if o.split("=", 1)[0].lstrip("+") not in keys] + list(extra)


def read_metrics(path: str | os.PathLike) -> dict[int, dict[str, float]]:
    """verl's file logger (one JSON object per step) as ``{step: metrics}``."""
    out: dict[int, dict[str, float]] = {}
    for line in Path(path).read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            out[int(row["step"])] = row["data"]
    return out


# Ray's prefix on each line it forwards from an actor: "(TaskRunner pid=12) " (optionally coloured, with ", ip=..."
# from another node), with the newline that ends the line before it.
_RAY_PREFIX = re.compile(r"\n?(\x1b\[[0-9;]*m)?\(\w+ pid=\d+(, ip=[^)]*)?\)(\x1b\[0m)? ?")


def joined_ray_log(log: str) -> str:
    """A driver log's text with Ray's actor prefixes removed together with the newline before each and the one
    space Ray puts after it, so a printed line Ray forwarded in pieces is whole again even when split inside a
    token; then every run of whitespace is one space (a split at a space leaves one)."""
    return re.sub(r"\s+", " ", _RAY_PREFIX.sub("", log))


def run(out: str | os.PathLike, *, steps: int = 2, stock: bool = False, save_freq: int = 1,
        metrics: str | None = None, overrides: Sequence[str] = (), extra_env: dict[str, str] | None = None,
        log: str | None = None, timeout: float | None = None, entry: str = ENTRIES[0],
        pythonpath: Sequence[str] = (), train_file: str | None = None, max_train: int = 8) -> int:
    """Build the tiny model and dataset under ``out`` and run ``main_ppo`` to completion; returns its exit code.

    ``log``: write the run's output there (else it goes to this process's stdout). ``entry``: the module run
    (:data:`ENTRIES`; the overrides are written as it takes them). ``pythonpath``: folders put first on the
    PYTHONPATH of the run, its Ray workers and the dataset builder (e.g. a ``pip install --target`` folder whose
    entry points register an environment). ``train_file``: a dataset built before (else the tasks of the run's
    environment, :func:`env_of`, or the rule-reward set for ``stock``). ``max_train``: how many of the
    environment's training tasks that dataset holds (at least ``data.train_batch_size``).
    """

    out = Path(out).expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    model_dir = str(build_tiny(out / "tiny_model"))
    metrics = metrics or str(out / f"metrics_{'stock' if stock else 'skillduet'}.jsonl")
    paths = [*map(str, pythonpath), str(REPO), os.environ.get("PYTHONPATH", "")]
    env = run_env(os.pathsep.join(p for p in paths if p), VERL_FILE_LOGGER_PATH=str(metrics), **(extra_env or {}))
    if train_file is None:
        train_file = build_rule_dataset(out) if stock else build_env_dataset(out, env_of(overrides), env, max_train)
    cmd = command(model_dir, train_file, str(out), steps=steps, stock=stock, save_freq=save_freq, env=env,
                  extra=overrides, entry=entry)
    return launch(cmd, env, out, log=log, timeout=timeout)


def launch(cmd: list[str], env: dict[str, str], cwd: Path, *, log: str | Path | None = None,
           timeout: float | None = None) -> int:
    """Run ``cmd`` (printed first, as the shell would with ``set -x``) in ``cwd``; its output goes to ``log``
    when given, else to this process's. Returns the exit code."""
    line = "+ " + " ".join(shlex.quote(c) for c in cmd)
    if log is None:
        print(line, flush=True)
        return subprocess.call(cmd, env=env, cwd=str(cwd), timeout=timeout)
    with open(log, "w") as fh:
        fh.write(line + "\n")
        fh.flush()
        return subprocess.call(cmd, env=env, cwd=str(cwd), stdout=fh, stderr=subprocess.STDOUT, timeout=timeout)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder for the model, data, checkpoints and logs")
    parser.add_argument("--steps", type=int, default=2, help="total training steps (default 2)")
    parser.add_argument("--save-freq", type=int, default=1, help="checkpoint every N steps (default 1)")
    parser.add_argument("--stock", action="store_true", help="stock verl (no plugin) on the rule-reward set")
    parser.add_argument("--metrics", default=None, help="metrics file (default <out>/metrics_<kind>.jsonl)")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides (they come last and win)")
    args = parser.parse_args(argv)
    out = Path(args.out).expanduser().resolve()
    code = run(out, steps=args.steps, stock=args.stock, save_freq=args.save_freq, metrics=args.metrics,
               overrides=args.overrides)
    ckpt = out / "checkpoints"
    print(f"exit code {code}")
    if os.environ.get("DRY_RUN", "") not in ("", "0"):
        return code
    print(f"checkpoints: {ckpt}")
    kind = "stock" if args.stock else "skillduet"
    print(f"metrics (verl's file logger): {args.metrics or out / f'metrics_{kind}.jsonl'}")
    if not args.stock:
        saved = sorted(ckpt.glob("global_step_*"), key=lambda p: int(p.name.rsplit("_", 1)[1]))
        if saved:
            print(f"skill bank of the last checkpoint: {saved[-1] / 'skillduet' / 'bank'}")
        print(f"live skill bank: {ckpt / 'skillduet' / 'bank.sqlite'}")
    return code


if __name__ == "__main__":
    sys.exit(main())
