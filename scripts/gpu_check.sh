#!/usr/bin/env bash
# On a lent GPU machine (its own torch and triton, no registry): install conveyor
# editable on that torch, then run benchmarks/gpu.py (checked and timed on CUDA), the
# triton-backend tests with CUDA as the default device, optionally the same benchmark's
# conveyor column from an older tree, and the default suite on CPU. Wheels the machine
# lacks travel in the ignored .whl/ (carry it: see the device tool's README); on
# 2026-11-27 (H100, Python 3.12, torch 2.11, Triton 3.6, transformers 5.17 already there)
# these were enough, fetched with
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux_2_17_x86_64 -d .whl \
#     hatchling trove-classifiers editables tomlkit expecttest
# A run with the defaults took 5 min there (machine start about 30 s, install 20 s, the
# benchmark 4 min, the triton tests on 12 workers 1-3 min).
# Logs go to $OUT (or /tmp/gpu_check). Switches:
#   GPU_TESTS    the tests run on CUDA (default: the triton backend's); GPU_TESTS=0 skips them
#   GPU_BENCH=0  skips benchmarks/gpu.py; GPU_BENCH_ARGS adds to its arguments
#   GPU_BEFORE   a folder holding an older tree's packages/ (e.g. `git archive REV packages`):
#                its conveyor column is timed too, in a separate process
#   GPU_CPU_SUITE=1 runs the default suite on that machine's CPU
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
if compgen -G ".whl/hf/*.whl" > /dev/null && ! python3 -c "import transformers" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site-hf .whl/hf/*.whl || echo "transformers wheels did not install"
fi
export PYTHONPATH=/tmp/site:/tmp/site-hf
editables=()
for pkg in packages/*/pyproject.toml; do editables+=(-e "$(dirname "$pkg")"); done
python3 -m pip install -q --no-index --no-deps --no-build-isolation "${editables[@]}" 2>&1 | tail -3
nvidia-smi -L
python3 -c "import sys, torch, triton, numpy, conveyor; print(sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__, 'numpy', numpy.__version__, 'conveyor', conveyor.__version__)"
python3 -c "import transformers; print('transformers', transformers.__version__)" 2>&1 | tail -1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRITON_INTERPRET=0
if [ "${GPU_BENCH:-1}" != 0 ]; then
  echo "== benchmarks/gpu.py"
  timeout -s INT -k 20 "${GPU_BENCH_TIMEOUT:-240}" python3 benchmarks/gpu.py --reps 20 ${GPU_BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.txt" | grep -E "^\||FAILED|failed|skipped|Error" | head -60
fi
if [ "${GPU_TESTS:-}" != 0 ]; then
  echo "== triton backend tests, CUDA default device"
  CONVEYOR_TEST_DEVICE=cuda timeout -s INT -k 20 "${GPU_TESTS_TIMEOUT:-150}" python3 -m pytest -p no:cacheprovider -n "${GPU_TESTS_WORKERS:-12}" --timeout 120 -rfE \
    ${GPU_TESTS:-packages/triton_backend/tests} > "$OUT/pytest_cuda.txt" 2>&1
  grep -E "^(FAILED|ERROR)|crashed" "$OUT/pytest_cuda.txt" | cut -c1-300 | head -60; tail -1 "$OUT/pytest_cuda.txt"
fi
if [ -n "${GPU_BEFORE:-}" ]; then
  echo "== benchmarks/gpu.py, conveyor from $GPU_BEFORE"
  before=$(ls -d "$GPU_BEFORE"/packages/*/src | paste -sd: -)
  PYTHONPATH="$before:$PYTHONPATH" CONVEYOR_BLOCK_PLUGINS=inductor timeout "${GPU_BEFORE_TIMEOUT:-120}" \
    python3 benchmarks/gpu.py --reps 20 --systems conveyor --no-check ${GPU_BENCH_ARGS:-} 2>&1 | tee "$OUT/bench_before.txt" | grep -E "^\||conveyor |failed|Error" | head -40
fi
if [ "${GPU_CPU_SUITE:-0}" != 0 ]; then
  echo "== default suite on CPU (this machine's torch and Python)"
  TRITON_INTERPRET=1 timeout 150 python3 -m pytest -p no:cacheprovider -n 12 --timeout 120 -rfE > "$OUT/pytest_cpu.txt" 2>&1
  grep -E "^(FAILED|ERROR)" "$OUT/pytest_cpu.txt" | cut -c1-200 | head -40; tail -1 "$OUT/pytest_cpu.txt"
fi
