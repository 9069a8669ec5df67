"""SkillDuetGRPOTrainer with ``use_vllm=True, vllm_mode="colocate"`` on vLLM's CPU build, launched in its own process
by test_trl_vllm.py (vLLM changes process-wide state: torch's thread count, distributed environment variables);
writes what the test checks to ``OUT_DIR/report.json``."""

from __future__ import annotations

import json
import os
import sys


# the last of the 3 steps samples without the weight sync: the trainer's forward then differs from vLLM's
SKIPPED_SYNC_STEP = 2


def main(model_dir: str, out_dir: str) -> None:
    from skillduet_testing.vllm_server import CPU_ENV

    for key, value in {**CPU_ENV, "TRL_EXPERIMENTAL_SILENCE": "1"}.items():
        os.environ.setdefault(key, value)
    import skillduet_plugin.integrations.trl.rollout as rollout
    from skillduet_plugin.envs.toy import ToyEnv
    from skillduet_plugin.integrations.trl import (CPU_SAFE_DEFAULTS, SkillDuetGRPOConfig, SkillDuetGRPOTrainer,
                                                   task_dataset)

    def no_hf(*args, **kwargs):  # negative control: the episodes must not be sampled by transformers
        raise AssertionError("hf_generate_fn used with use_vllm=True")

    rollout.hf_generate_fn = no_hf
    args = SkillDuetGRPOConfig(**{**CPU_SAFE_DEFAULTS, "output_dir": out_dir, "use_vllm": True,
                                  "vllm_mode": "colocate", "vllm_enable_sleep_mode": False,
                                  "vllm_max_model_length": 1024, "num_generations": 4,
                                  "per_device_train_batch_size": 4, "max_completion_length": 96, "max_steps": 3,
                                  "env_name": "toy", "max_turns": 2, "max_new_tokens_per_turn": 12,
                                  "save_strategy": "no", "seed": 0, "learning_rate": 1e-3, "disable_tqdm": True,
                                  "skillduet": {"consolidation_interval": 1, "opd_coef": 0.2}})
    trainer = SkillDuetGRPOTrainer(model=model_dir, args=args, train_dataset=task_dataset(ToyEnv()))
    vllm_gen = trainer.vllm_generation
    generated: list[list[list[int]]] = []
    syncs: list[int] = []
    skipped: list[int] = []
    generate, sync = vllm_gen.llm.generate, vllm_gen.sync_weights

    def spy_generate(prompts, params, **kwargs):
        outputs = generate(prompts, params, **kwargs)
        generated.append([list(o.outputs[0].token_ids) for o in outputs])
        return outputs

    def spy_sync():
        if trainer.state.global_step == SKIPPED_SYNC_STEP:  # negative control: vLLM samples with stale weights
            skipped.append(trainer.state.global_step)
            return None
        syncs.append(trainer.state.global_step)
        return sync()

    vllm_gen.llm.generate, vllm_gen.sync_weights = spy_generate, spy_sync
    episodes: list[list[int]] = []
    play = rollout.play_batch

    def spy_play(tr, task_ids):
        eps = play(tr, task_ids)
        episodes.extend(list(ep.tokens.completion_ids) for ep in eps)
        return eps

    rollout.play_batch = spy_play
    import skillduet_plugin.integrations.trl.trainer as trainer_module

    trainer_module.play_batch = spy_play
    trainer.train()
    bank = trainer.lifecycle.bank
    report = {"logs": trainer.state.log_history, "generate_calls": len(generated),
              "generated_tokens": sum(len(ids) for call in generated for ids in call),
              "generated": generated, "episodes": episodes, "syncs": syncs, "skipped_syncs": skipped,
              "candidates": [c.text for c in bank.candidates()],
              "scored": sum(1 for c in bank.candidates() if c.scores.get("strength") is not None),
              "globals": [v.version for v in bank.history()]}
    with open(os.path.join(out_dir, "report.json"), "w") as fh:
        json.dump(report, fh)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
