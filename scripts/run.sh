#!/usr/bin/env bash
# Sets up (Debian packages), builds, and runs the server on the built-in demo model:
# an OpenAI-compatible API at http://127.0.0.1:8000/v1 with per-user memory in ./data.
# Extra arguments go to `inferscale serve` (e.g. --model DIR, --port 9000).
set -euo pipefail
cd "$(dirname "$0")/.."
SETUP_CLIENT=0 ./scripts/setup.sh  # the server needs no Python client
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DINFERSCALE_TESTS=OFF -DINFERSCALE_BENCH=OFF >/dev/null
cmake --build build -j"$(nproc)" --target inferscale
exec ./build/inferscale serve --data-dir "${INFERSCALE_DATA_DIR:-data}" "$@"
