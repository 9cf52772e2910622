#!/usr/bin/env bash
# Issue 9's targets measured in one device call, then printed as one table (bench/targets_table.py):
# decode at batch 1 (and 32), TTFT at k = 50 in process and over HTTP at one client, 100 clients
# over HTTP and 100 users at once in process, each with bf16 and with FP8 projections. Llama-3.1-8B
# shapes, random weights, LoCoMo (conv-26 in process; all 10 conversations over HTTP), w = 2,
# an FP8 KV cache over HTTP as the earlier runs.
#
# Runs from the bundle (scripts/gpu_bundle.sh copies it and targets_table.py into .gpu/cuda):
#   bash .gpu/cuda/gpu_targets.sh   (on the GPU host, in a copy of this checkout holding .gpu/cuda)
# Writes $OUT/targets.md (the table) and $OUT/targets.tgz (every log: device.txt, serving_Q.log,
# mem_Q.log, http_Q/... with the HTTP results.json; Q: none, fp8), two files, so that the device
# tool brings them all back (it returns a limited number of files, none deep in folders).
# Environment: QUANTS (default "none fp8"), SKIP_HTTP=1 (in process only); about 4 minutes a Q.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/gpu_out}
T="$OUT/targets"
mkdir -p "$T"
. "$HERE/gpu_env.sh"
nvidia-smi --query-gpu=name --format=csv,noheader | head -1 > "$T/device.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
D="$HERE/data"
t0=$(date +%s)
for q in ${QUANTS:-none fp8}; do
  timeout 100 "$HERE/bench_cuda_serving" --decode-only --quick --quantization "$q" > "$T/serving_$q.log" 2>&1
  echo "decode $q rc=$? $(($(date +%s) - t0)) s"
  timeout 150 "$HERE/bench_memory_serving" --device cuda --config "$D/Llama-3.1-8B.json" --tokenizer "$D/tokenizer.model.v3" \
    --locomo "$D/locomo10.json" --questions 10 --k 50 --users 100 --max-tokens 32 --kv-cache-mb 40960 \
    --kv-cache-dtype fp8 --quantization "$q" > "$T/mem_$q.log" 2>&1
  echo "in process $q rc=$? $(($(date +%s) - t0)) s"
  [ -n "${SKIP_HTTP:-}" ] && continue
  OUT="$T/http_$q" SERVE_ARGS="--kv-cache-dtype fp8 --no-background-encoding --quantization $q" \
    GRID_CLIENTS=1,100 GRID_K=50 GRID_MODES=inject CELL_SECONDS=10 QUESTIONS=60 MAX_SECONDS=60 \
    timeout 170 bash "$HERE/gpu_http_load.sh" > "$T/http_$q.txt" 2>&1
  echo "http $q rc=$? $(($(date +%s) - t0)) s"
done
python3 "$HERE/targets_table.py" "$T" | tee "$OUT/targets.md"
tar -czf "$OUT/targets.tgz" -C "$OUT" targets && rm -rf "$T"
