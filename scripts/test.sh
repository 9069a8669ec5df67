#!/usr/bin/env bash
# Set up (scripts/setup.sh), check the import contract, and run the whole test suite on CPU, slow tests
# included, two workers.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
# shellcheck disable=SC1091
. "${SKILLDUET_VENV:-$HOME/.cache/skillduet-ci/venv}/bin/activate"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 TRL_EXPERIMENTAL_SILENCE=1
export TOKENIZERS_PARALLELISM=false WANDB_MODE=disabled RAY_USAGE_STATS_ENABLED=0
cd "$ROOT"
# The layering of docs/ARCHITECTURE.md (.importlinter): an upward import fails the build before any test runs.
PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" lint-imports "$ROOT/.importlinter"
exec python -m pytest -n "${PYTEST_WORKERS:-2}" --dist loadfile --timeout 1500 -q "$@"
