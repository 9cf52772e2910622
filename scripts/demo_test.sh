#!/usr/bin/env bash
# CTest `demo`: the README's memory demo (scripts/demo.py --check) against the server scripts/run.sh
# starts (scripts/serve_defaults.sh: SmolLM2 with its model card's sampling, hybrid retrieval), on
# a fresh data directory. Fails unless every checked greedy answer in mode inject holds its key value.
# Usage: scripts/demo_test.sh INFERSCALE_BINARY [demo.py args]. Exits 77 (skip) without the SmolLM2 model.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$1
shift
PY=${INFERSCALE_PYTHON:-python3}
source "$ROOT/scripts/test_serve.sh"
start_default_test_server "$B"
"$PY" "$ROOT/scripts/demo.py" --base-url "http://127.0.0.1:$PORT" --check "$@"
