#!/usr/bin/env bash
# GRPO baseline (no extraction, no OPD, no Global) with the same agent loop. ENV=alfworld|webshop (default alfworld).
# Paper: ALFWorld 86.43%, WebShop 89.84% success / 92.96 score.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ENV=${ENV:-alfworld}
run_recipe "$ENV" "grpo_${ENV}_qwen3_4b" \
    skillduet.opd_coef=0.0 skillduet.use_global=false skillduet.extract_local=false "$@"
