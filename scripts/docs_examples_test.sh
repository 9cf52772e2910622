#!/usr/bin/env bash
# CTest `docs_examples`: every curl and Python example of README.md and docs/API.md
# (scripts/docs_examples.py), as written but for the port, against the server scripts/run.sh
# starts (scripts/serve_defaults.sh) on a fresh data directory.
# Usage: scripts/docs_examples_test.sh INFERSCALE_BINARY. Exits 77 (skip) without the SmolLM2 model.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$1
PY=${INFERSCALE_PYTHON:-$ROOT/.venv/bin/python}  # the official clients the Python examples use
export MEM0_TELEMETRY=false
source "$ROOT/scripts/test_serve.sh"
start_default_test_server "$B"
cd "$W"  # examples that write files write them here
"$PY" "$ROOT/scripts/docs_examples.py" --port "$PORT" --python "$PY" "$ROOT/README.md" "$ROOT/docs/API.md"
