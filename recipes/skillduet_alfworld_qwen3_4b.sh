#!/usr/bin/env bash
# SkillDuet on ALFWorld with Qwen3-4B (paper defaults: lambda_OPD 0.1, beta 5, Strength, top 50%, every 10 steps).
# Paper: 98.57% overall success on ALFWorld valid_unseen (134 games). Extra overrides: append them.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
run_recipe alfworld skillduet_alfworld_qwen3_4b "$@"
