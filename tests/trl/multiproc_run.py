"""Two-process SkillDuet run on CPU (gloo), launched by test_trl_multiprocess.py; writes one JSON per rank."""

from __future__ import annotations

import json
import os
import sys


def main(model_dir: str, out_dir: str) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch

    torch.set_num_threads(1)
    from skillduet_plugin.integrations.trl import (CPU_SAFE_DEFAULTS, SkillDuetGRPOConfig, SkillDuetGRPOTrainer,
                                                   task_dataset)
    from skillduet_plugin.core.opd import opd_denominator, opd_loss
    from skillduet_plugin.envs.toy import ToyEnv

    args = SkillDuetGRPOConfig(**{**CPU_SAFE_DEFAULTS, "output_dir": out_dir, "num_generations": 4,
                                  "per_device_train_batch_size": 2, "max_completion_length": 48, "max_steps": 3,
                                  "env_name": "toy", "max_turns": 2, "max_new_tokens_per_turn": 8,
                                  "save_strategy": "no", "seed": 0, "disable_tqdm": True,
                                  "skillduet": {"consolidation_interval": 1, "opd_coef": 0.2}})
    trainer = SkillDuetGRPOTrainer(model=model_dir, args=args, train_dataset=task_dataset(ToyEnv()))
    gathered = []
    extract = trainer._extract

    def counting(trajs, step):
        result = extract(trajs, step)
        if trainer.accelerator.process_index == 1 and trajs:
            # rank 1 loses one row's Local skill (as when the analyzer's reply for it is rejected), so the two
            # ranks supervise different token counts and the OPD normalisation across ranks is put to the test
            result.assignment.pop(trajs[0].traj_id, None)
        gathered.append({"local": len(trajs), "all": len(trainer._step_trajectories), "skills": len(result.skills),
                         "assigned": sum(1 for t in trajs if result.skill_for(t.traj_id) is not None)})
        return result

    trainer._extract = counting
    opd_calls = []
    term = trainer._dense.term

    def recording(model, student, teacher, inputs, mode):
        # per micro-batch: the OPD term the loss adds, and what Eq. 1 over this micro-batch alone is (its own
        # normalisation: core.opd.opd_loss) with its supervised count, for the test to rebuild Eq. 1 over the union
        value = term(model, student, teacher, inputs, mode)
        if mode == "train":
            cfg = trainer.skillduet
            local, stats = opd_loss(student.detach(), teacher, inputs["opd_mask"], beta=cfg.gate_beta,
                                    agg=cfg.opd_agg)
            opd_calls.append({"step": trainer.state.global_step, "term": float(value.detach()),
                              "gate_mean": stats["opd/gate_mean"], "tokens": float(inputs["opd_mask"].sum()),
                              "local_loss": float(local), "local_items": float(opd_denominator(inputs["opd_mask"])),
                              "num_items": float(inputs["opd_num_items"]),
                              "scale": trainer.current_gradient_accumulation_steps / trainer.args.steps_per_generation})
        return value

    trainer._dense.term = recording
    trainer.train()
    rank = trainer.accelerator.process_index
    report = {"rank": rank, "world": trainer.accelerator.num_processes, "writes": trainer.lifecycle.write,
              "readonly_bank": trainer.lifecycle.bank.readonly, "extract": gathered,
              "history": [h for h in trainer.rollout_history if h["mode"] == "train"],
              "globals": {s: trainer.lifecycle.global_for(s).version for s in ("open", "fetch")},
              "opd": opd_calls, "logged": [h for h in trainer.state.log_history if "opd/loss" in h]}
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as fh:
        json.dump(report, fh)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
