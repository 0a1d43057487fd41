#!/usr/bin/env bash
# Create (or reuse) the virtual environment in .venv and install looplab with its dev extras.
# torch==2.13.0 goes first: with torch already present, the package's own range installs nothing more,
# whereas a bare `torch` requirement on an empty environment pulls the multi-GB CUDA wheels.
# TORCH_INDEX_URL (e.g. PyTorch's CPU wheel index) says where that torch comes from; an installed torch is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY="$VENV/bin/python"
if [ ! -x "$PY" ]; then
  python3 -m venv "$VENV"
fi
stamp="$VENV/.looplab-installed"
if [ -f "$stamp" ] && [ "$stamp" -nt settings.ini ] && [ "$stamp" -nt setup.py ]; then
  exit 0
fi
"$PY" -m pip install -q --disable-pip-version-check --upgrade pip
if ! "$PY" -c "import torch" 2>/dev/null; then
  index=()
  if [ -n "${TORCH_INDEX_URL:-}" ]; then index=(--index-url "$TORCH_INDEX_URL"); fi
  "$PY" -m pip install -q --disable-pip-version-check "${index[@]}" "torch==2.13.0"
fi
"$PY" -m pip install -q --disable-pip-version-check -e ".[dev]"
touch "$stamp"
