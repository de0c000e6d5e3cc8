#!/usr/bin/env bash
# Set up a development environment on a fresh machine: .venv with torch 2.13.0 (CPU),
# every conveyor package installed editable, and the test tools.
#
# TORCH=2.14.1 VENV=.venv-torch2.14.1 ./scripts/bootstrap.sh sets up the same
# environment on another supported torch (2.11.0, 2.12.1, 2.13.0, 2.14.1): CI
# runs the suite on 2.14.1 this way; nox has a session per version.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
TORCH=${TORCH:-2.13.0}
VENV=${VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
# torch first and pinned: a looser requirement would make pip fetch a multi-GB CUDA build
"$VENV/bin/python" -m pip install -q "torch==$TORCH"
editables=()
for pkg in packages/*/pyproject.toml; do
  editables+=(-e "$(dirname "$pkg")")
done
# the torch just installed stays: conveyor's packages accept every supported one
"$VENV/bin/python" -m pip install -q "torch==$TORCH" "${editables[@]}" -e '.[test]'
# Triton 3.6's interpreter (what torch 2.11 brings) cannot run with numpy 2.4 (it calls
# int() on one-element arrays); conveyor_triton names this when it happens
if "$VENV/bin/python" -c "import sys, triton; sys.exit(tuple(map(int, triton.__version__.split('.')[:2])) >= (3, 7))" 2>/dev/null; then
  "$VENV/bin/python" -m pip install -q "numpy<2.4"
fi
"$VENV/bin/python" -c "import torch, triton, conveyor; print('conveyor', conveyor.__version__, 'on torch', torch.__version__, 'triton', triton.__version__)"
