#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, with the bundle copied there:
#   bash .gpu/cuda/gpu_run.sh   (on the GPU host, in a copy of this checkout holding .gpu/cuda)
# Every parity test, then every benchmark; logs under $OUT; a short table at the end.
# GPU_RUN_QUICK=1 shortens the benchmarks.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
QUICK=${GPU_RUN_QUICK:+--quick}

. "$HERE/gpu_env.sh"  # cuBLASLt from the machine's CUDA toolkit (too large to carry)
{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
  echo "cublasLt from: $CUBLAS_DIR"
  for b in test_cuda bench_cuda_kernels bench_cuda_serving; do ldd "$HERE/$b" | grep -E "not found|cublas|fmt" | sed "s/^/$b: /"; done
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

# One process per test suite: a crash or sticky CUDA error in one leaves the others running.
t0=$(date +%s)
test_rc=0
for suite in CudaKernels CudaAttention CudaBackend OpParity CudaVectorIndex CudaEmbedder CudaQuantWeights CudaSmolLM2; do
  PARITY_OUT="$OUT/parity.txt" timeout 240 "$HERE/test_cuda" --gtest_filter="$suite.*:*/$suite.*" > "$OUT/test_$suite.log" 2>&1 || test_rc=$?
done
t1=$(date +%s)
timeout 80 "$HERE/bench_cuda_kernels" $QUICK > "$OUT/bench_kernels.log" 2>&1
kern_rc=$?
t2=$(date +%s)
timeout 120 "$HERE/bench_cuda_serving" $QUICK > "$OUT/bench_serving.log" 2>&1
serv_rc=$?
# End to end through Engine + MemoryService (LoCoMo conv-26, BM25, inject vs text), two model shapes.
D="$HERE/data"
mem_rc=0
for cfg in Mistral-7B-v0.3 Llama-3.1-8B; do
  timeout 150 "$HERE/bench_memory_serving" --device cuda --config "$D/$cfg.json" --tokenizer "$D/tokenizer.model.v3" \
    --locomo "$D/locomo10.json" --questions "${GPU_MEM_QUESTIONS:-20}" --users 100 --max-tokens 32 --kv-cache-mb 40960 \
    > "$OUT/bench_memory_$cfg.log" 2>&1 || mem_rc=$?
done
t3=$(date +%s)

# Memory checker over the fast suites (Firecracker machines support it); skipped when absent.
if command -v compute-sanitizer >/dev/null 2>&1 && [ -z "${GPU_RUN_NO_SANITIZER:-}" ]; then
  timeout 150 compute-sanitizer --tool memcheck --print-limit 20 "$HERE/test_cuda" \
    --gtest_filter='CudaKernels.*:CudaBackend.*:CudaAttention.PrefillSplitKv' > "$OUT/sanitizer.log" 2>&1
  san_rc=$?
else
  echo "compute-sanitizer not run" > "$OUT/sanitizer.log"
  san_rc=-1
fi
t4=$(date +%s)

echo "== test_cuda (last failing rc $test_rc, $((t1 - t0)) s)"
for suite in CudaKernels CudaAttention CudaBackend OpParity CudaVectorIndex CudaEmbedder CudaQuantWeights CudaSmolLM2; do
  log="$OUT/test_$suite.log"
  echo "-- $suite: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \] [0-9]+ test' "$log" | tr '\n' ' ')"
  grep -E "^\[  FAILED  \] [A-Z]" "$log" | head -10
  grep -E "CUDA error|cuBLAS status|what\(\)|Segmentation|Aborted" "$log" | head -5
  sed -n '/== parity summary/,$p' "$log"
done
echo "== compute-sanitizer memcheck (rc $san_rc, $((t4 - t3)) s)"
grep -E "ERROR SUMMARY|Invalid|out of bounds|PASSED|FAILED" "$OUT/sanitizer.log" | head -12
echo "== bench_cuda_kernels (rc $kern_rc, $((t2 - t1)) s)"
cat "$OUT/bench_kernels.log" | tail -40
echo "== bench_cuda_serving (rc $serv_rc, $((t3 - t2)) s)"
cat "$OUT/bench_serving.log" | tail -30
echo "== bench_memory_serving (rc $mem_rc)"
for cfg in Mistral-7B-v0.3 Llama-3.1-8B; do tail -25 "$OUT/bench_memory_$cfg.log"; done
