#!/usr/bin/env bash
# Ablation: the retention ratio of consolidation. KEEP_RATIO=0.25|0.5|0.75 (default 0.25), ENV=alfworld|webshop.
# Paper: Top25% matches Top50% on ALFWorld, Top50% is best on WebShop, Top75% is worse on both.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ENV=${ENV:-alfworld}
KEEP_RATIO=${KEEP_RATIO:-0.25}
run_recipe "$ENV" "keep_ratio_${KEEP_RATIO}_${ENV}_qwen3_4b" skillduet.keep_ratio="$KEEP_RATIO" "$@"
