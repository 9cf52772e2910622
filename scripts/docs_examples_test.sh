#!/usr/bin/env bash
# CTest `docs_examples`: every curl and Python example of README.md and docs/API.md
# (scripts/docs_examples.py), as written but for the port, against the server scripts/run.sh
# starts (scripts/serve_defaults.sh) on a fresh data directory.
# Usage: scripts/docs_examples_test.sh INFERSCALE_BINARY. Exits 77 (skip) without the SmolLM2 model.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$1
shift
PY=${INFERSCALE_PYTHON:-$ROOT/.venv/bin/python}  # the official clients the Python examples use
export MEM0_TELEMETRY=false
source "$ROOT/scripts/serve_defaults.sh"
if [ "$DEFAULT_MODEL" != smollm2 ]; then
  echo "skipped: models/SmolLM2-135M-Instruct.Q4_1.gguf is absent (scripts/fetch_models.sh fetches it)"
  exit 77
fi
source "$ROOT/scripts/test_serve.sh"
if ! start_test_server "$W/serve.log" "$B" "${DEFAULT_SERVE[@]}" --data-dir "$W/data"; then
  echo "the server did not start:"; cat "$W/serve.log"; exit 1
fi
cd "$W"  # examples that write files write them here
"$PY" "$ROOT/scripts/docs_examples.py" --port "$PORT" --python "$PY" "$ROOT/README.md" "$ROOT/docs/API.md"
