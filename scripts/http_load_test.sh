#!/usr/bin/env bash
# CTest `http_load`: a smoke run of bench/http_load.py against a real `inferscale serve` (demo
# model, CPU, memory on): the LoCoMo fixture imported through the REST API under a tenant of its
# own, a warm-up, then a tiny grid (inject and text, k = 3, 1 and 4 streaming clients, 8 tokens,
# ~2 s a cell); then its self-test against the trivial server. Checks results.json has every
# field of every cell, 0 errors, 0 fallbacks, injected tokens in inject and none in text; no speed
# assertion. Usage: scripts/http_load_test.sh INFERSCALE_BINARY
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$1
PY=${INFERSCALE_PYTHON:-$ROOT/.venv/bin/python}
[ -x "$PY" ] || PY=python3  # only the standard library is needed (matplotlib for the plots)
source "$ROOT/scripts/test_serve.sh"
# Without background encoding, so that the warm-up is what encodes the facts (checked below); the
# background path has its own test (ServerMemoryBackground).
if ! start_test_server "$W/serve.log" "$B" --data-dir "$W/data" --window 2 --threads 1 --kv-cache-mb 64 \
    --no-background-encoding; then
  echo "the server did not start:"; cat "$W/serve.log"; exit 1
fi

"$PY" "$ROOT/bench/http_load.py" --base-url "http://127.0.0.1:$PORT/v1" --data "$ROOT/tests/fixtures/locomo_mini.json" \
  --tenant ci-load --clients 1,4 --modes inject,text --k 3 --tokens 8 --duration 2 --min-requests 4 \
  --max-cell-seconds 60 --timeout 60 --out "$W/out" || { echo "http_load.py failed"; tail -20 "$W/serve.log"; exit 1; }

"$PY" - "$W/out" <<'PY' || exit 1
import json, os, sys
out = sys.argv[1]
r = json.load(open(os.path.join(out, "results.json")))
problems = []
def need(cond, what):
    if not cond:
        problems.append(what)
need(r["import"]["turns"] == 7 and sorted(r["import"]["imported"]) == ["mini-1", "mini-2"], "import: %s" % r.get("import"))
need(r["warmups"][0]["errors"] == 0 and r["warmups"][0]["requests"] == 3, "warm-up: %s" % r.get("warmups"))
need(r["warmups"][0]["facts_encoded"] > 0, "the warm-up encoded no facts")
cells = {(c["mode"], c["clients"]): c for c in r["cells"]}
need(sorted(cells) == [("inject", 1), ("inject", 4), ("text", 1), ("text", 4)], "cells: %s" % sorted(cells))
for key, c in sorted(cells.items()):
    name = "%s N=%d" % key
    for f in ("requests", "req_per_s", "output_tok_per_s", "errors", "error_kinds", "fallbacks", "fallback_reasons",
              "facts_encoded", "cached_tokens_mean", "window_s", "steady"):
        need(f in c, "%s: no %s" % (name, f))
    for f, subs in (("ttft_ms", ("p50", "p95", "p99")), ("itl_ms", ("p50", "p99")), ("e2e_ms", ("p50", "p99"))):
        need(all(isinstance(c.get(f, {}).get(s), float) and c[f][s] > 0 for s in subs), "%s: %s %s" % (name, f, c.get(f)))
    need(c["steady"] and c["requests"] >= 4 and c["req_per_s"] > 0, "%s: %d requests, steady %s" % (name, c["requests"], c["steady"]))
    need(c["errors"] == 0, "%s: errors %s" % (name, c["error_kinds"]))
    need(c["fallbacks"] == 0 and c["mode_served_other"] == 0, "%s: fallbacks %s" % (name, c["fallback_reasons"]))
    need(abs(c["output_tok_per_s"] - 8 * c["req_per_s"]) < 0.01 * c["output_tok_per_s"] + 1, "%s: tokens/s" % name)
    need(c["ttft_ms"]["p50"] <= c["ttft_ms"]["p95"] <= c["ttft_ms"]["p99"], "%s: percentiles out of order" % name)
    # The server's TTFT (/metrics: arrival in the engine -> first token) lies inside the client's,
    # request by request; the two means are over nearly the same requests (the server's can take in
    # a request the client cut, or one of the cell before), so the bound has room, not the units.
    need(c.get("server_ttft_count", 0) >= c["requests"], "%s: server TTFT count %s" % (name, c.get("server_ttft_count")))
    need(0 < (c.get("server_ttft_ms_mean") or 0) <= 1.5 * c["ttft_all_ms_mean"] + 50,
         "%s: server TTFT mean %s against the client's %s" % (name, c.get("server_ttft_ms_mean"), c["ttft_all_ms_mean"]))
    # The engine's forwards during the cell, by kind: some decoded, and the counts agree with the means.
    f, m = c.get("forwards") or {}, c.get("forward_ms_mean") or {}
    need(sorted(f) == ["decode", "mixed", "prefill"] and f["decode"] > 0, "%s: forwards %s" % (name, f))
    need(all((m.get(k) is not None and m[k] > 0) == (f.get(k, 0) > 0) for k in f), "%s: forward ms %s for %s" % (name, m, f))
    if key[0] == "inject":
        need(c["injected_tokens_mean"] > 0, "%s: nothing injected" % name)
    else:
        need(c["injected_tokens_mean"] == 0, "%s: injected in text mode" % name)
md = open(os.path.join(out, "results.md")).read()
need(md.count("\n| inject |") == 2 and md.count("\n| text |") == 2, "results.md rows")
try:
    import matplotlib  # noqa: F401
    for png in ("ttft_vs_k.png", "reqs_vs_clients.png"):
        need(open(os.path.join(out, png), "rb").read(8) == b"\x89PNG\r\n\x1a\n", "no plot " + png)
except ImportError:
    print("no matplotlib: plots not checked")
for p in problems:
    print("FAIL " + p)
print("http_load results: %d cells, %d problems" % (len(cells), len(problems)))
sys.exit(1 if problems else 0)
PY

# The client against the trivial server (no model): no errors, chunks timed.
"$PY" "$ROOT/bench/http_load.py" --self-test --clients 20 --tokens 8 --duration 1 --out "$W/self" > "$W/self.txt" \
  || { echo "self-test failed:"; cat "$W/self.txt"; exit 1; }
"$PY" -c "
import json, sys
s = json.load(open('$W/self/selftest.json'))
cells = [r for r in s['rows'] if 'clients' in r]
ok = len(cells) == 2 and all(r['requests'] > 0 and r['errors'] == 0 and r['client_lag_ms']['p50'] >= 0 for r in cells)
print('self-test:', 'ok' if ok else 'FAIL', [(r['server_itl_ms'], r['requests'], r['errors']) for r in cells])
sys.exit(0 if ok else 1)"

# The drain probe against a server that encodes written facts in the background: plain chats
# while the fixture's turns encode and after; no errors, the drain seen and ended, both phases timed
# or the drain ended before the first probe (the demo model is fast).
kill -TERM "$PID" 2>/dev/null; wait "$PID" 2>/dev/null; PID=""
if ! start_test_server "$W/serve_bg.log" "$B" --data-dir "$W/data_bg" --window 2 --threads 1 --kv-cache-mb 64; then
  echo "the server did not start:"; cat "$W/serve_bg.log"; exit 1
fi
"$PY" "$ROOT/bench/http_load.py" --drain-probe --base-url "http://127.0.0.1:$PORT/v1" \
  --data "$ROOT/tests/fixtures/locomo_mini.json" --tenant ci-drain --tokens 4 --probe-interval 0.05 --probe-after 1 \
  --out "$W/drain" > "$W/drain.txt" 2>&1 || { echo "drain probe failed:"; cat "$W/drain.txt"; exit 1; }
"$PY" -c "
import json, sys
r = json.load(open('$W/drain/drain_probe.json'))
after = r['after_drain']
ok = r['errors'] == 0 and r['drain_seconds'] is not None and after['requests'] > 0 and after['ttft_ms_p50'] > 0 \
    and r['background_encoded'] > 0 and r['import']['turns'] == 7
print('drain probe:', 'ok' if ok else 'FAIL', r['drain_seconds'], r['background_encoded'], r['during_drain']['requests'], after['requests'])
sys.exit(0 if ok else 1)"
