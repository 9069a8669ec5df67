#!/usr/bin/env bash
# SkillDuet through verl's real training loop on a CPU: no GPU, nothing downloaded (the verl counterpart of
# `skillduet train`). It builds the tiny offline model and generated ALFWorld games, then runs
# `python -m skillduet_plugin.main_ppo ... trainer.plugins=[skillduet]` with the test-only CPU platform shim and
# CPU rollout backend (rollout.name=hf): 4 games x 2 episodes of 3 turns per step, offline analyzer and
# synthesizer, a Global consolidation and a checkpoint (with the skill bank) every step. ~2-4 minutes on 2 cores.
#
#   bash recipes/cpu_tiny_alfworld.sh                      # 2 steps into ./skillduet_cpu_tiny
#   OUT=/tmp/run STEPS=3 bash recipes/cpu_tiny_alfworld.sh # a third step resumes from the last checkpoint
#   bash recipes/cpu_tiny_alfworld.sh skillduet.opd_coef=0.2   # extra Hydra overrides come last and win
#   DRY_RUN=1 bash recipes/cpu_tiny_alfworld.sh            # compose + validate + print the config, exit 0
#
# Needs a checkout (the CPU pieces are test support) and the package with its verl extra (`pip install -e ".[verl]"`).
# It is a smoke run of the whole loop, not training: the tiny model learns nothing useful in a few steps.
set -euo pipefail
OUT=${OUT:-skillduet_cpu_tiny}
STEPS=${STEPS:-2}
PYTHON=${PYTHON:-python3}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false WANDB_MODE=disabled
export RAY_USAGE_STATS_ENABLED=0 TRL_EXPERIMENTAL_SILENCE=1 OMP_NUM_THREADS=1
unset CUDA_VISIBLE_DEVICES  # Ray refuses an empty value
# the CPU platform shim and rollout backend are test support in the checkout (skillduet_testing/), not in the wheel
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
dry=()
if [[ -n "${DRY_RUN:-}" && "${DRY_RUN}" != 0 ]]; then
    dry=(hydra.output_subdir=null hydra/job_logging=none hydra/hydra_logging=none)
fi
exec "$PYTHON" -m skillduet_testing.verl_cpu_run --out "$OUT" --steps "$STEPS" --save-freq 1 -- "${dry[@]}" "$@"
