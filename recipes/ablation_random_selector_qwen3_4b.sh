#!/usr/bin/env bash
# Ablation: the Random selector instead of Strength (Global kept, top 50%). ENV=alfworld|webshop (default webshop).
# Paper (WebShop): Random 89.06% vs Strength 92.97% success.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ENV=${ENV:-webshop}
run_recipe "$ENV" "random_selector_${ENV}_qwen3_4b" skillduet.selector=random "$@"
