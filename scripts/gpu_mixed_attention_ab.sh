#!/usr/bin/env bash
# Mixed steps (prefills beside decodes): their decodes on the decode kernel (the split, the default)
# against every sequence on the prefill tiles (--mixed-attention-tiles), side by side on one machine
# (BENCHMARKS run 22): the parity tests and memcheck of the split, bench_cuda_serving --mixed-only,
# then HTTP at 100 clients (k = HTTP_K, default 50; FP8 cache) alternately, ROUNDS pairs (default 2).
# After BUILD=build scripts/gpu_bundle.sh:
#   bash scripts/gpu_mixed_attention_ab.sh   (on the GPU host, in a copy of this checkout holding .gpu/cuda)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
C=$HERE/../.gpu/cuda
OUT=${OUT:-/tmp/r22}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:$C:${LD_LIBRARY_PATH:-}"
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader; } | tee "$OUT/log.txt"
T0=$(date +%s)
stamp() { echo "== $1 ($(( $(date +%s) - T0 )) s)" | tee -a "$OUT/log.txt"; }
stamp "parity: Host*, CudaBackend.*"
"$C/test_cuda" --gtest_filter='Host*:CudaBackend.*' > "$OUT/tests.txt" 2>&1
rc=$?
grep -E '^\[  (PASSED|FAILED) |^\[  FAILED|tests ran|mixed/' "$OUT/tests.txt" | head -60 | tee -a "$OUT/log.txt"
echo "test rc=$rc" | tee -a "$OUT/log.txt"
[ $rc -ne 0 ] && { tail -80 "$OUT/tests.txt"; exit 1; }
stamp "memcheck over the mixed-batch test"
compute-sanitizer --tool memcheck --error-exitcode 9 "$C/test_cuda" --gtest_filter='CudaBackend.MixedBatchDecodesRunTheDecodeKernel' > "$OUT/memcheck.txt" 2>&1
echo "memcheck rc=$?" | tee -a "$OUT/log.txt"; grep -E 'ERROR SUMMARY' "$OUT/memcheck.txt" | tee -a "$OUT/log.txt"
stamp "bench_cuda_serving --mixed-only"
"$C/bench_cuda_serving" --mixed-only 2>&1 | tee "$OUT/mixed.txt" | tee -a "$OUT/log.txt"
# HTTP, 100 streaming clients at k = 50 (FP8 cache; facts encoded by the warm-up, no background
# drain), the mixed steps' decodes on the decode kernel (split) or on the tiles, alternately.
for round in $(seq "${ROUNDS:-2}"); do
  for v in split tiles; do
    stamp "HTTP $v $round"
    args="--kv-cache-dtype fp8 --no-background-encoding"
    [ "$v" = tiles ] && args="$args --mixed-attention-tiles"
    SERVE_ARGS="$args" GRID_CLIENTS=100 GRID_K=${HTTP_K:-50} GRID_MODES=inject CELL_SECONDS=12 QUESTIONS=60 MAX_SECONDS=200 \
      OUT="$OUT/h_$v$round" bash "$C/gpu_http_load.sh" > "$OUT/h_$v$round.txt" 2>&1
    cp "$OUT/h_$v$round/http_load/results.json" "$OUT/http_${v}${round}.json" 2>/dev/null
    grep -E '^\[1/1\]|warm-up' "$OUT/h_$v$round.txt" | cut -c1-600 | tee -a "$OUT/log.txt"
    tail -3 "$OUT/h_$v$round.txt" | cut -c1-300 >> "$OUT/log.txt"
  done
done
stamp "done"
rm -rf "$OUT"/h_split* "$OUT"/h_tiles*  # at most 8 result files come back from the GPU host: ROUNDS <= 2
ls "$OUT"
