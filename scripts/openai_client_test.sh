#!/usr/bin/env bash
# CTest `openai_client`: the official `openai` Python client against a real `inferscale serve`
# (demo model, CPU, memory from the LoCoMo fixture), through scripts/openai_client_check.py.
# Usage: scripts/openai_client_test.sh INFERSCALE_BINARY
# Exits 77 (skip) when no Python with `openai` is found (scripts/setup.sh installs it in .venv).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$1
PY=${INFERSCALE_PYTHON:-$ROOT/.venv/bin/python}
if ! "$PY" -c "import openai" 2>/dev/null; then
  echo "skipped: no Python with the openai package at $PY (run scripts/setup.sh)"
  exit 77
fi
source "$ROOT/scripts/test_serve.sh"
"$B" memory import-locomo "$ROOT/tests/fixtures/locomo_mini.json" --data-dir "$W/data" >/dev/null || exit 1
if ! start_test_server "$W/serve.log" "$B" --data-dir "$W/data" --threads 1 --kv-cache-mb 64; then
  echo "the server did not start:"; cat "$W/serve.log"; exit 1
fi
"$PY" "$ROOT/scripts/openai_client_check.py" --base-url "http://127.0.0.1:$PORT/v1" --memory-user mini-1
