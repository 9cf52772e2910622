#!/usr/bin/env bash
# Runs an official Python client's check against a real `inferscale serve` (demo model, CPU, memory
# from the LoCoMo fixture): the ctests `openai_client` and `mem0_client`.
# Usage: scripts/client_test.sh INFERSCALE_BINARY PYTHON_MODULE CHECK_SCRIPT [ARGS...]
#   Every "{URL}" in ARGS becomes the server's root URL (http://127.0.0.1:PORT).
# Exits 77 (skip) when no Python with PYTHON_MODULE is found (scripts/setup.sh installs the clients
# in .venv), else the check's exit status.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$1
MODULE=$2
CHECK=$3
shift 3
PY=${INFERSCALE_PYTHON:-$ROOT/.venv/bin/python}
export MEM0_TELEMETRY=false  # the mem0ai client otherwise reports to its vendor
if ! "$PY" -c "import $MODULE" 2>/dev/null; then
  echo "skipped: no Python with the $MODULE package at $PY (run scripts/setup.sh)"
  exit 77
fi
W=$(mktemp -d)
export MEM0_DIR="$W/mem0"  # the mem0ai client writes its config there, not in ~/.mem0
PID=""
cleanup() {
  [ -n "$PID" ] && kill -TERM "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
  rm -rf "$W"
}
trap cleanup EXIT
# CLIENT_API_KEYS="KEY TENANT;KEY TENANT": serve behind those API keys (--api-keys).
KEYS=()
if [ -n "${CLIENT_API_KEYS:-}" ]; then
  tr ';' '\n' <<< "$CLIENT_API_KEYS" > "$W/keys"
  KEYS=(--api-keys "$W/keys")
fi
"$B" memory import-locomo "$ROOT/tests/fixtures/locomo_mini.json" --data-dir "$W/data" >/dev/null || exit 1
for attempt in 1 2 3 4 5; do
  PORT=$("$PY" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
  "$B" serve --data-dir "$W/data" --port "$PORT" --threads 1 --kv-cache-mb 64 "${KEYS[@]}" > "$W/serve.log" 2>&1 &
  PID=$!
  for _ in $(seq 1 100); do
    if "$PY" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/health')" 2>/dev/null; then
      "$PY" "$CHECK" "${@//\{URL\}/http://127.0.0.1:$PORT}"
      exit $?
    fi
    kill -0 "$PID" 2>/dev/null || break  # exited: the port was taken meanwhile; try another
    sleep 0.2
  done
  kill -TERM "$PID" 2>/dev/null; wait "$PID" 2>/dev/null; PID=""
done
echo "the server did not start:"; cat "$W/serve.log"
exit 1
