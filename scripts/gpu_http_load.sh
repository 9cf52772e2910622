#!/usr/bin/env bash
# The HTTP load benchmark on the GPU machine (issue 9, part 5), in about 5 minutes of wall time:
# `inferscale serve --device cuda` on Llama-3.1-8B shapes with seeded random bf16 weights (the
# Mistral v3 tokenizer, memory on, w = 2), all 10 LoCoMo conversations imported as 10 users
# through the memory REST API, a warm-up that encodes the facts every k = 50 request retrieves,
# then bench/http_load.py's reduced grid: N in {1, 10, 50, 100} streaming clients x k in
# {5, 20, 50} x inject/text, 32 output tokens (ignore_eos). First a short self-test of the client
# against a trivial server (what the client alone can drive on this machine).
#
# Runs from the bundle (scripts/gpu_bundle.sh copies it, http_load.py, locomo_eval.py, a stripped
# `inferscale`, its libraries and the data into .gpu/cuda):
#   bash .gpu/cuda/gpu_http_load.sh   (on the GPU host, in a copy of this checkout holding .gpu/cuda)
# Writes $OUT/http_load/{results.json,results.md,serve.log}, $OUT/selftest/selftest.json and
# $OUT/http_load.log; the PNGs when the machine has matplotlib, else here afterwards:
#   bench/http_load.py --plot-only <files_at>/http_load
# Environment: GRID_CLIENTS, GRID_K, GRID_TOKENS, GRID_MODES, CELL_SECONDS (measured seconds a
# cell), MAX_SECONDS (no cell starts after this many seconds), QUESTIONS (per conversation, 0: all),
# NO_BACKGROUND_WAIT=1 (start the cells right after the warm-up, while the background encoding of
# the facts it did not retrieve still drains; by default the cells wait for the drain), SERVE_ARGS
# (more `serve` flags, e.g. "--kv-cache-dtype fp8"), KV_CACHE_MB and MEMORY_POOL_MB (the two sizes
# below, which otherwise follow the card's memory).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
. "$HERE/gpu_env.sh"
LIBS=$LD_LIBRARY_PATH  # for the server only: the Python client runs without it
PORT=${PORT:-8124}
{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  echo "cpus: $(nproc); python: $(python3 --version 2>&1)"
} | tee "$OUT/env.txt"

# The client alone against a trivial server: 100 clients paced like a GPU decode, then flat out.
env -u LD_LIBRARY_PATH python3 "$HERE/http_load.py" --self-test --clients 100 --tokens 32 --duration 2 \
  --selftest-itl-ms 5 --out "$OUT/selftest" > "$OUT/selftest.txt" 2>&1
echo "self-test rc=$?"; tail -4 "$OUT/selftest.txt"

# Memory sizes for the 8B shape (128 KiB of bf16 KV a token): the KV cache holds 100 contexts of
# ~2,800 tokens (k = 50 in text mode) and then some; the pool holds every fact of the 10 users
# (~5,900 facts, ~41 GB), so the grid's inject cells encode nothing after the warm-up. A card of
# under 100 GB (an H100) takes half of each, and the pool in FP8 (the same facts in half the bytes).
if [ -z "${KV_CACHE_MB:-}${MEMORY_POOL_MB:-}" ] &&
   [ "$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)" -lt 100000 ]; then
  KV_CACHE_MB=20480 MEMORY_POOL_MB=24576
  case " ${SERVE_ARGS:-} " in *" --memory-kv-dtype "*) ;; *) SERVE_ARGS="${SERVE_ARGS:-} --memory-kv-dtype fp8" ;; esac
  echo "a card of under 100 GB: --kv-cache-mb $KV_CACHE_MB --memory-pool-mb $MEMORY_POOL_MB,$SERVE_ARGS"
fi
SERVE="env LD_LIBRARY_PATH=$LIBS $HERE/inferscale serve --model $HERE/data/Llama-3.1-8B.json --random-weights \
  --random-dtype bf16 --tokenizer $HERE/data/tokenizer.model.v3 --device cuda --data-dir /tmp/http-load-data \
  --window 2 --kv-cache-mb ${KV_CACHE_MB:-40960} --memory-pool-mb ${MEMORY_POOL_MB:-49152} --max-num-seqs 256 --max-pending 1024 ${SERVE_ARGS:-} --port {port}"
rm -rf /tmp/http-load-data
BG_WAIT=--background-wait
[ -n "${NO_BACKGROUND_WAIT:-}" ] && BG_WAIT=""
env -u LD_LIBRARY_PATH python3 "$HERE/http_load.py" --base-url "http://127.0.0.1:$PORT" \
  --data "$HERE/data/locomo10.json" --max-questions "${QUESTIONS:-0}" \
  --clients "${GRID_CLIENTS:-1,10,50,100}" --k "${GRID_K:-5,20,50}" --tokens "${GRID_TOKENS:-32}" \
  --modes "${GRID_MODES:-inject,text}" --duration "${CELL_SECONDS:-4}" --min-requests 20 --max-cell-seconds 25 \
  --timeout 120 --warmup-concurrency 32 --max-seconds "${MAX_SECONDS:-270}" --pause 0.3 \
  $BG_WAIT \
  --serve "$SERVE" --serve-timeout 180 --out "$OUT/http_load" 2>&1 | tee "$OUT/http_load.log"
rc=${PIPESTATUS[0]}
echo "http_load rc=$rc"
exit "$rc"
