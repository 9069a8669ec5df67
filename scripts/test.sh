#!/usr/bin/env bash
# Set up (scripts/setup.sh), lint (flake8, the import contract), and run the whole test suite on CPU, slow tests
# included, two workers.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
# shellcheck disable=SC1091
. "${SKILLDUET_VENV:-$HOME/.cache/skillduet-ci/venv}/bin/activate"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 TRL_EXPERIMENTAL_SILENCE=1
export TOKENIZERS_PARALLELISM=false WANDB_MODE=disabled RAY_USAGE_STATS_ENABLED=0
# One torch/OpenMP thread per pytest worker: two workers x two threads on two cores stall each other (a
# descheduled OpenMP thread holds up every op; docs/benchmarks.md section 5 measured 4-6x). Results do not
# depend on it (the product sets its own thread count, and 1 vs 2 threads gave bit-identical cloning losses).
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
cd "$ROOT"
# Lint before any test runs; a finding fails the build: flake8 (setup.cfg) and the layering of
# docs/ARCHITECTURE.md (.importlinter: an upward import).
flake8
PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" lint-imports --config "$ROOT/.importlinter"
# --durations: the slowest tests in every log, so a CI run that grows is explained by its own output.
exec python -m pytest -n "${PYTEST_WORKERS:-2}" --dist loadfile --timeout 1500 --durations=25 -q "$@"
