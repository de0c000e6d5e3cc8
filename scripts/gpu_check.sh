#!/usr/bin/env bash
# On a lent GPU machine (its own torch and triton, no registry): install conveyor
# editable on that torch, then run benchmarks/gpu.py (checked and timed on CUDA), the
# triton-backend and integration tests with CUDA as the default device, and the
# default suite on CPU. Wheels it needs that the machine lacks (hatchling,
# trove-classifiers, expecttest) travel in .whl/ (see the device tool's README).
# Logs go to $OUT (or /tmp/gpu_check). GPU_TESTS chooses the tests run on CUDA (default: the
# triton backend's and the integration tests); GPU_BENCH=0 and GPU_CPU_SUITE=0 skip those parts.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
editables=()
for pkg in packages/*/pyproject.toml; do editables+=(-e "$(dirname "$pkg")"); done
python3 -m pip install -q --no-index --no-deps --no-build-isolation "${editables[@]}" 2>&1 | tail -3
nvidia-smi -L
python3 -c "import sys, torch, triton, numpy, conveyor; print(sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__, 'numpy', numpy.__version__, 'conveyor', conveyor.__version__)"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
if [ "${GPU_BENCH:-1}" != 0 ]; then
  echo "== benchmarks/gpu.py"
  TRITON_INTERPRET=0 timeout 170 python3 benchmarks/gpu.py --reps 30 2>&1 | tee "$OUT/bench.txt" | tail -40
fi
echo "== triton backend and integration tests, CUDA default device"
CONVEYOR_TEST_DEVICE=cuda TRITON_INTERPRET=0 timeout 230 python3 -m pytest -p no:cacheprovider -n 8 --timeout 120 -rfE \
  ${GPU_TESTS:-packages/triton_backend/tests tests} > "$OUT/pytest_cuda.txt" 2>&1
grep -E "^(FAILED|ERROR)" "$OUT/pytest_cuda.txt" | cut -c1-200 | head -60; tail -1 "$OUT/pytest_cuda.txt"
if [ "${GPU_CPU_SUITE:-1}" != 0 ]; then
  echo "== default suite on CPU (this machine's torch and Python)"
  timeout 150 python3 -m pytest -p no:cacheprovider -n 12 --timeout 120 -rfE > "$OUT/pytest_cpu.txt" 2>&1
  grep -E "^(FAILED|ERROR)" "$OUT/pytest_cpu.txt" | cut -c1-200 | head -40; tail -1 "$OUT/pytest_cpu.txt"
fi
