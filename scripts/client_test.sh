#!/usr/bin/env bash
# Runs an official Python client's check against a real `inferscale serve` (demo model, CPU, memory
# from the LoCoMo fixture): the ctests `openai_client` and `mem0_client`.
# Usage: scripts/client_test.sh INFERSCALE_BINARY PYTHON_MODULE CHECK_SCRIPT [ARGS...]
#   Every "{URL}" in ARGS becomes the server's root URL (http://127.0.0.1:PORT).
#   CLIENT_API_KEYS="KEY TENANT;KEY TENANT" serves behind those API keys (--api-keys).
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
source "$ROOT/scripts/test_serve.sh"
export MEM0_DIR="$W/mem0"  # the mem0ai client writes its config there, not in ~/.mem0
KEYS=()
if [ -n "${CLIENT_API_KEYS:-}" ]; then
  tr ';' '\n' <<< "$CLIENT_API_KEYS" > "$W/keys"
  KEYS=(--api-keys "$W/keys")
fi
"$B" memory import-locomo "$ROOT/tests/fixtures/locomo_mini.json" --data-dir "$W/data" >/dev/null || exit 1
if ! start_test_server "$W/serve.log" "$B" --data-dir "$W/data" --threads 1 --kv-cache-mb 64 "${KEYS[@]}"; then
  echo "the server did not start:"; cat "$W/serve.log"; exit 1
fi
"$PY" "$CHECK" "${@//\{URL\}/http://127.0.0.1:$PORT}"
