#!/usr/bin/env bash
# Builds and runs every test (ctest). Usage: scripts/test.sh [ctest args...]
# Reuses ./build as configured (CI configures it with the CUDA backend where nvcc exists); GPU
# tests (label `cuda`) run only where an NVIDIA GPU is present.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DINFERSCALE_TESTS=ON -DINFERSCALE_BENCH=ON >/dev/null  # ON even after run.sh turned them off
cmake --build build -j"$(nproc)"
GPU_FILTER=(-LE cuda)
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then GPU_FILTER=(); fi
ctest --test-dir build --output-on-failure --no-tests=error -j"$(nproc)" "${GPU_FILTER[@]}" "$@"
