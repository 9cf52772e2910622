#!/usr/bin/env bash
# CTest `demo`: the README's memory demo (scripts/demo.py --check) against the server scripts/run.sh
# starts (scripts/serve_defaults.sh: SmolLM2 with its model card's sampling, hybrid retrieval), on
# a fresh data directory. Fails unless every greedy answer in mode inject holds its key value.
# Usage: scripts/demo_test.sh INFERSCALE_BINARY. Exits 77 (skip) without the SmolLM2 model.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$1
shift
PY=${INFERSCALE_PYTHON:-python3}
source "$ROOT/scripts/serve_defaults.sh"
if [ "$DEFAULT_MODEL" != smollm2 ]; then
  echo "skipped: models/SmolLM2-135M-Instruct.Q4_1.gguf is absent (scripts/fetch_models.sh fetches it)"
  exit 77
fi
source "$ROOT/scripts/test_serve.sh"
if ! start_test_server "$W/serve.log" "$B" "${DEFAULT_SERVE[@]}" --data-dir "$W/data"; then
  echo "the server did not start:"; cat "$W/serve.log"; exit 1
fi
"$PY" "$ROOT/scripts/demo.py" --base-url "http://127.0.0.1:$PORT" --check "$@"
