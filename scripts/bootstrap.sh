#!/usr/bin/env bash
# Set up a development environment on a fresh machine: .venv with torch 2.13.0 (CPU),
# every conveyor package installed editable, and the test tools.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# torch first and pinned: a looser requirement would make pip fetch a multi-GB CUDA build
.venv/bin/python -m pip install -q torch==2.13.0
editables=()
for pkg in packages/*/pyproject.toml; do
  editables+=(-e "$(dirname "$pkg")")
done
.venv/bin/python -m pip install -q "${editables[@]}" -e '.[test]'
.venv/bin/python -c "import torch, conveyor; print('conveyor', conveyor.__version__, 'on torch', torch.__version__)"
