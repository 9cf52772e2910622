# Sourced by the CTest scripts that drive a real `inferscale serve` (client_test.sh,
# http_load_test.sh, demo_test.sh, docs_examples_test.sh). Needs $PY (a Python) set. Sourcing it
# makes the work folder $W (removed at exit) and stops the server started below at exit.
W=$(mktemp -d)
PID=""
cleanup() {
  [ -n "$PID" ] && kill -TERM "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
  rm -rf "$W"
}
trap cleanup EXIT
#
# start_test_server LOG BINARY SERVE_ARGS...: starts BINARY serve SERVE_ARGS --port PORT in the
# background on a free loopback port and returns once /health answers, with PORT and PID set; a
# port taken between picking and binding is retried with another (5 tries). Returns 1 (PID empty)
# when the server never answered; its output is in LOG.
start_test_server() {
  local log=$1 bin=$2
  shift 2
  local attempt
  for attempt in 1 2 3 4 5; do
    PORT=$("$PY" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
    "$bin" serve "$@" --port "$PORT" > "$log" 2>&1 &
    PID=$!
    for _ in $(seq 1 100); do
      "$PY" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/health')" 2>/dev/null && return 0
      kill -0 "$PID" 2>/dev/null || break  # exited: the port was taken meanwhile; try another
      sleep 0.2
    done
    kill -TERM "$PID" 2>/dev/null; wait "$PID" 2>/dev/null; PID=""
  done
  return 1
}
#
# start_default_test_server BINARY: the server scripts/run.sh starts (scripts/serve_defaults.sh)
# on a fresh data directory in $W, as start_test_server; exits the script with 77 (skip) when the
# SmolLM2 model is absent and with 1 when the server does not start. Needs ROOT set.
start_default_test_server() {
  source "$ROOT/scripts/serve_defaults.sh"
  if [ "$DEFAULT_MODEL" != smollm2 ]; then
    echo "skipped: models/SmolLM2-135M-Instruct.Q4_1.gguf is absent (scripts/fetch_models.sh fetches it)"
    exit 77
  fi
  if ! start_test_server "$W/serve.log" "$1" "${DEFAULT_SERVE[@]}" --data-dir "$W/data"; then
    echo "the server did not start:"; cat "$W/serve.log"; exit 1
  fi
}

