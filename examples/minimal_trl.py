"""SkillDuet on TRL in one readable script: the trainer used directly, no run directory machinery.

A tiny offline model plays generated ALFWorld games; after every step the offline analyzer writes Local skills
(OPD teacher context) and every 2 steps the Strength-ranked candidates are consolidated into the Global that the
next rollouts see. Runs on CPU in a few minutes:

    python examples/minimal_trl.py --steps 4
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


@dataclass
class Args:
    output_dir: str = "runs/minimal-trl"
    steps: int = 4  # optimizer steps
    tasks_per_step: int = 2  # tasks per step; each is played num_generations times (a GRPO group)
    num_generations: int = 4
    train_tasks: int = 12  # generated training games used
    max_turns: int = 4
    max_new_tokens_per_turn: int = 24
    consolidation_interval: int = 2
    seed: int = 0


def main(args: Args) -> None:
    import torch

    from skillduet_plugin import envs
    from skillduet_plugin.integrations.trl import (CPU_SAFE_DEFAULTS, SkillDuetGRPOConfig, SkillDuetGRPOTrainer,
                                                   task_dataset)
    from skillduet_plugin.warmstart.tiny_model import build_tiny

    torch.set_num_threads(1)  # a tiny model only pays synchronisation for more threads

    # 1. The policy: a tiny Qwen3 built offline (a real checkpoint folder works the same way).
    model_dir = build_tiny(os.path.join(args.output_dir, "tiny_model"), size="tiny", seed=args.seed)

    # 2. The tasks: GRPOTrainer samples dataset rows; a row is a task id, the rollout plays it.
    with envs.make("alfworld", split="train") as env:  # generated games (cached under ~/.cache/skillduet)
        dataset = task_dataset(env, env.tasks[:args.train_tasks])

    # 3. GRPO settings + the SkillDuet method + the multi-turn rollout settings, in one config.
    config = SkillDuetGRPOConfig(
        output_dir=args.output_dir,
        # bf16=False, gradient_checkpointing=False, use_vllm=False, ...: TRL's GPU defaults off on CPU
        **{**CPU_SAFE_DEFAULTS, "num_generations": args.num_generations, "max_completion_length": 2048},
        max_steps=args.steps,
        per_device_train_batch_size=args.tasks_per_step * args.num_generations,
        learning_rate=2e-4,
        beta=0.0,
        seed=args.seed,
        save_strategy="no",
        skillduet={
            "opd_coef": 0.1,  # lambda_OPD: weight of the gated distillation term
            "gate_beta": 5.0,  # the confidence gate sigmoid(beta * (t - s))
            "consolidation_interval": args.consolidation_interval,
            "keep_ratio": 0.5,  # keep the top 50% of candidates by Strength
            "selector": "strength",
            "skill_token_budget": 160,
            "analyzer": {"kind": "offline"},  # a deterministic rule-based analyzer: no LLM server needed
            "synthesizer": {"kind": "offline"},
        },
        env_name="alfworld",
        max_turns=args.max_turns,
        max_new_tokens_per_turn=args.max_new_tokens_per_turn,
        max_total_tokens=2048,
    )

    # 4. Train. The trainer rolls out, extracts Local skills, adds the OPD term, scores and consolidates.
    trainer = SkillDuetGRPOTrainer(model=str(model_dir), args=config, train_dataset=dataset)
    trainer.train()

    # 5. What the run learned: the Global of each task type (also in <output_dir>/skill_bank.sqlite).
    bank = trainer.lifecycle.bank
    for scope in bank.scopes():
        g = bank.current_global(scope)
        if g.version is not None:
            print(f"--- Global for {scope!r} (version {g.version}) ---\n{g.text}\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, default in vars(Args()).items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=default)
    main(Args(**vars(parser.parse_args())))
