#!/usr/bin/env bash
# SkillDuet on WebShop with Qwen3-4B (paper defaults). Paper: 92.97% success, 95.18 score (goals 0-499).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
run_recipe webshop skillduet_webshop_qwen3_4b "$@"
