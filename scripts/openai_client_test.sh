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
W=$(mktemp -d)
PID=""
cleanup() {
  [ -n "$PID" ] && kill -TERM "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
  rm -rf "$W"
}
trap cleanup EXIT
"$B" memory import-locomo "$ROOT/tests/fixtures/locomo_mini.json" --data-dir "$W/data" >/dev/null || exit 1
for attempt in 1 2 3 4 5; do
  PORT=$("$PY" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
  "$B" serve --data-dir "$W/data" --port "$PORT" --threads 1 --kv-cache-mb 64 > "$W/serve.log" 2>&1 &
  PID=$!
  for _ in $(seq 1 100); do
    if "$PY" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/health')" 2>/dev/null; then
      "$PY" "$ROOT/scripts/openai_client_check.py" --base-url "http://127.0.0.1:$PORT/v1" --memory-user mini-1
      exit $?
    fi
    kill -0 "$PID" 2>/dev/null || break  # exited: the port was taken meanwhile; try another
    sleep 0.2
  done
  kill -TERM "$PID" 2>/dev/null; wait "$PID" 2>/dev/null; PID=""
done
echo "the server did not start:"; cat "$W/serve.log"
exit 1
