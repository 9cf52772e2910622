#!/usr/bin/env bash
# Scale out on the GPU machine (issue "Scale out"), from its bundle (scripts/gpu_bundle.sh makes .gpu/so):
#   bash .gpu/so/gpu_scale_out.sh   (on the GPU host, in a copy of this checkout holding .gpu/so)
#
# 1. One replica (`serve --device cuda`, Llama-3.1-8B shapes, seeded random bf16 weights, memory
#    in a SQLite data dir, --kv-dir) behind HAProxy with deploy/haproxy/inferscale.cfg. The 10
#    LoCoMo conversations imported, a warm-up at k = 50, then TTFT at k = 50 (inject, 1 client,
#    bench/http_load.py) direct and through HAProxy, alternately, 3 cells each: the proxy's cost.
# 2. Moved users (bench/moved_users.py): replica B on the same data dir; each user's first request
#    on B after A served it, with B sharing A's --kv-dir (KV files loaded), then with a fresh B
#    without it (facts encoded again).
# Writes $OUT/scale_out.log and the JSON results under $OUT.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
. "$HERE/gpu_env.sh"
LIBS=$LD_LIBRARY_PATH
exec > >(tee "$OUT/scale_out.log") 2>&1
date -u +"%Y-%m-%dT%H:%M:%SZ"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
DATA=/tmp/so-data KV=/tmp/so-kv
rm -rf "$DATA" "$KV"
SERVE="env LD_LIBRARY_PATH=$LIBS $HERE/inferscale serve --model $HERE/data/Llama-3.1-8B.json --random-weights \
  --random-dtype bf16 --tokenizer $HERE/data/tokenizer.model.v3 --device cuda --data-dir $DATA --window 2 \
  --kv-cache-mb 8192 --memory-pool-mb 8192 --memory-kv-dtype fp8 --no-background-encoding"
pids=()
start() {  # NAME PORT EXTRA...
  local name=$1 port=$2
  shift 2
  $SERVE --port "$port" "$@" >"$OUT/$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 300); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && { echo "$name up on $port"; return 0; }
    sleep 0.5
  done
  echo "$name did not start"; tail -20 "$OUT/$name.log"; return 1
}
cleanup() { kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; }
trap cleanup EXIT

start a 8201 --kv-dir "$KV" || exit 1
cat >/tmp/so-servers.cfg <<EOF
backend inferscale_replicas from replicas
    server r1 127.0.0.1:8201 id 1
EOF
INFERSCALE_HAPROXY_BIND=127.0.0.1:8200 "$HERE/haproxy" -f "$HERE/haproxy.cfg" -f /tmp/so-servers.cfg >"$OUT/haproxy.log" 2>&1 &
pids+=($!)
sleep 1
curl -sf http://127.0.0.1:8200/health && echo " haproxy up on 8200"

PY="env -u LD_LIBRARY_PATH python3"
LOAD="$PY $HERE/http_load.py --data $HERE/data/locomo10.json --max-questions 10 --clients 1 --k 50 --tokens 4 \
  --modes inject --w 2 --duration 4 --min-requests 40 --max-cell-seconds 20 --pause 0.2 --no-resume"
echo "== import + warm-up at k = 50 (direct)"
$LOAD --base-url http://127.0.0.1:8201 --out "$OUT/ttft_warm" | tail -3
python3 -c 'import json, sys; sys.exit(any(w["errors"] for w in json.load(open(sys.argv[1])).get("warmups", [])))' \
  "$OUT/ttft_warm/results.json" || { echo "the warm-up had errors: stopping"; exit 1; }
for round in 1 2 3; do
  for side in direct proxy; do
    port=8201; [ $side = proxy ] && port=8200
    $LOAD --base-url "http://127.0.0.1:$port" --no-import --no-warmup --out "$OUT/ttft_${side}_$round" >/dev/null 2>&1
    python3 - "$OUT/ttft_${side}_$round/results.json" "$side" "$round" <<'PY'
import json, sys
cells = json.load(open(sys.argv[1]))["cells"]
c = cells[0]
if not c["requests"]:
    sys.exit(f"round {sys.argv[3]} {sys.argv[2]}: no request answered ({c['errors']} errors: {c['error_kinds']})")
print(f"round {sys.argv[3]} {sys.argv[2]:6s} TTFT p50 {c['ttft_ms']['p50']:.2f} ms p95 {c['ttft_ms']['p95']:.2f} ms "
      f"over {c['requests']} requests, errors {c['errors']}")
PY
  done
done
echo "== proxy cost on /health and a 1-token completion"
$PY "$HERE/proxy_latency.py" --direct http://127.0.0.1:8201 --proxy http://127.0.0.1:8200 -n 400 2>&1 | tail -12

echo "== moved users: B shares A's KV files"
start b 8202 --kv-dir "$KV" || exit 1
$PY "$HERE/moved_users.py" --a http://127.0.0.1:8201 --b http://127.0.0.1:8202 --data "$HERE/data/locomo10.json" \
  --k 50 --w 2 --label "shared KV files" --out "$OUT/moved_shared.json" | tail -1
kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null; unset 'pids[-1]'
echo "== moved users: B without KV files (encodes)"
start b2 8203 || exit 1
$PY "$HERE/moved_users.py" --a http://127.0.0.1:8201 --b http://127.0.0.1:8203 --data "$HERE/data/locomo10.json" \
  --k 50 --w 2 --skip-a --label "no shared KV files" --out "$OUT/moved_encode.json" | tail -1
echo "done"
