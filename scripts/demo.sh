#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the complete CPU SkillDuet demo (`skillduet train` with no arguments).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
# shellcheck disable=SC1091
. "${SKILLDUET_VENV:-$HOME/.cache/skillduet-ci/venv}/bin/activate"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 TRL_EXPERIMENTAL_SILENCE=1
export TOKENIZERS_PARALLELISM=false WANDB_MODE=disabled
cd "$ROOT"
exec skillduet train "$@"
