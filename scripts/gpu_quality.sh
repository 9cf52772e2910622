#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root: issue 7's real-model work on
# SmolLM2-135M-Instruct. The bundle comes from scripts/gpu_quality_bundle.sh; files written under
# /root stay while the machine is warm, so the files travel over consecutive calls (each within 30 s):
#   bash scripts/gpu_quality.sh stash                  carry .gpu/m1 and .gpu/q: model part 1 -> /root/m,
#                                                      the bundle -> /root/q
#   bash scripts/gpu_quality.sh stash                  carry .gpu/e1, then .gpu/e2 in the next call:
#                                                      the sentence encoder -> /root/e
#   bash scripts/gpu_quality.sh STAGE...               carry .gpu/m2 (and .gpu/q if not stashed)
# Stages (any order, several per call):
#   parity   every CUDA parity test (test_cuda), SmolLM2 on the GPU vs the CPU included; PARITY_FILTER
#            (a gtest filter) runs those tests only
#   kl       bench_quality_locomo: KL(text || inject), top-1, NLL over KL_CONVS (default conv-26), grid
#            KL_K x KL_W (and KL_EXTRA arguments), retrieving as f1 does; no question starts after
#            KL_SECONDS (default 450), and kl.json holds every conversation finished
#   recompute  the same at k = 10, 20, w = 0, 2 over memory.recompute / recompute_last values
#   ttft     bench_memory_serving at Llama-3.1-8B shapes (random weights), k = 50: TTFT of inject with
#            memory.recompute_attention 0, 0.05, 0.1, 0.15, 0.2 (the probe pass and the recompute), and
#            TTFT_EXTRA arguments (--recompute-last M,...: the recompute alone)
#   f1       the server on the GPU + bench/locomo_eval.py (F1 and NLL over HTTP) for F1_CONVS, F1_K, F1_W
#            (and F1_EXTRA arguments), resumable (results in /root/f1, copied to $OUT), stopped after
#            F1_SECONDS (default 400); with the stashed sentence encoder the server retrieves as
#            scripts/run.sh's does (hybrid: BM25 + all-MiniLM-L6-v2, encoded on the GPU)
# Outputs go to $OUT (the folder whose files come back from the GPU host).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /root/m
MODEL=/root/m/SmolLM2-135M-Instruct.Q4_1.gguf
SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
Q=/root/q
# untar ARCHIVE DIR: DIR holds the archive's files alone (Python's tarfile: xz may be missing here).
untar() { rm -rf "$2" && mkdir -p "$2" && python3 -c "import tarfile,sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" "$1" "$2"; }
if [ "${1:-}" = stash ]; then
  [ -f .gpu/m1/part1 ] && cp .gpu/m1/part1 /root/m/part1
  [ -f .gpu/e1/part ] && cp .gpu/e1/part /root/m/e_part1
  if [ -f .gpu/e2/part ] && [ -f /root/m/e_part1 ]; then
    cat /root/m/e_part1 .gpu/e2/part > /root/m/minilm.tar.xz && untar /root/m/minilm.tar.xz /root/e
  fi
  [ -f .gpu/q/bundle.tar.xz ] && untar .gpu/q/bundle.tar.xz "$Q"
  ls -la /root/m /root/e /root/q 2>&1 | head -20
  exit 0
fi
# The model, joined from its parts once, for the stages that read it (ttft and a filtered parity
# run do not).
if [ ! -f "$MODEL" ] && [ -f /root/m/part1 ] && [ -f .gpu/m2/part2 ]; then
  cat /root/m/part1 .gpu/m2/part2 > "$MODEL"
  echo "$SHA  $MODEL" | sha256sum -c - || rm -f "$MODEL"
fi
need_model() { [ -f "$MODEL" ] || { echo "stage $1: no model (stash .gpu/m1 first, then carry .gpu/m2)"; return 1; }; }
[ -f .gpu/q/bundle.tar.xz ] && untar .gpu/q/bundle.tar.xz "$Q"
# Retrieval as scripts/run.sh serves it (hybrid) when the sentence encoder was stashed, else BM25.
EMBEDDER=()
[ -d /root/e/all-MiniLM-L6-v2 ] && EMBEDDER=(--embedder /root/e/all-MiniLM-L6-v2)
[ -x "$Q/bin/inferscale" ] || { echo "no bundle in $Q (carry .gpu/q)"; exit 1; }
python3 -m pip install -q --no-index --no-deps --no-compile --target /root/site "$Q"/whl/*.whl 2>/dev/null
export PYTHONPATH=/root/site PYTHONUNBUFFERED=1
CUBLAS=$(dirname "$(find / -name 'libcublasLt.so.13*' -not -path '/proc/*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH="$CUBLAS:$Q/bin:${LD_LIBRARY_PATH:-}"
export INFERSCALE_SMOLLM2=$MODEL
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/env.txt" 2>&1
D=$Q/locomo10.json

for stage in "$@"; do
  t0=$(date +%s)
  case "$stage" in
    parity)
      if [ -n "${PARITY_FILTER:-}" ]; then
        PARITY_OUT="$OUT/parity.txt" timeout 150 "$Q/bin/test_cuda" --gtest_filter="$PARITY_FILTER" > "$OUT/test_filtered.log" 2>&1
        echo "parity $PARITY_FILTER rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/test_filtered.log" | tr '\n' ' ')"
        grep -E "attention_mass" "$OUT/test_filtered.log" | head -8
        echo "stage $stage: $(( $(date +%s) - t0 )) s"
        continue
      fi
      need_model parity || continue
      for suite in CudaKernels CudaAttention CudaBackend CudaVectorIndex CudaEmbedder CudaQuantWeights CudaSmolLM2; do
        PARITY_OUT="$OUT/parity.txt" timeout 150 "$Q/bin/test_cuda" --gtest_filter="$suite.*" > "$OUT/test_$suite.log" 2>&1
        echo "parity $suite rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/test_$suite.log" | tr '\n' ' ')"
      done
      grep -h -E "SmolLM2|chat [0-9]" "$OUT/test_CudaSmolLM2.log" ;;
    kl)
      need_model kl || continue
      timeout $(( ${KL_SECONDS:-450} + 90 )) "$Q/bin/bench_quality_locomo" --seconds "${KL_SECONDS:-450}" --device cuda --model "$MODEL" --locomo "$D" --convs "${KL_CONVS:-conv-26}" \
        --k "${KL_K:-5,10,20,50}" --w "${KL_W:-0,2,5}" ${KL_EXTRA:-} --kv-cache-mb 8192 --pool-mb 16384 \
        "${EMBEDDER[@]}" --json "$OUT/kl.json" > "$OUT/kl.md" 2> "$OUT/kl.err"
      echo "kl rc=$?"; tail -n 25 "$OUT/kl.md" ;;
    recompute)
      need_model recompute || continue
      timeout 400 "$Q/bin/bench_quality_locomo" --device cuda --model "$MODEL" --locomo "$D" --convs "${KL_CONVS:-conv-26}" \
        --k 10,20 --w 0,2 --recompute 0,1,2,4,8 --recompute-last 0,1,2,3 --kv-cache-mb 8192 --pool-mb 16384 \
        --json "$OUT/recompute.json" > "$OUT/recompute.md" 2> "$OUT/recompute.err"
      echo "recompute rc=$?"; tail -n 50 "$OUT/recompute.md" ;;
    ttft)
      timeout "${TTFT_SECONDS:-300}" "$Q/bin/bench_memory_serving" --device cuda --config "$Q/Llama-3.1-8B.json" \
        --tokenizer "$Q/tokenizer.model.v3" --locomo "$D" --k 50 --questions "${TTFT_QUESTIONS:-20}" --users 4 --max-tokens 4 \
        --recompute-attention 0,0.05,0.1,0.15,0.2 ${TTFT_EXTRA:-} --kv-cache-mb 16384 > "$OUT/ttft.md" 2> "$OUT/ttft.err"
      echo "ttft rc=$?"; cat "$OUT/ttft.md" ;;
    f1)
      need_model f1 || continue
      mkdir -p /root/d /root/f1
      if ! curl -sf localhost:8000/health >/dev/null 2>&1; then
        setsid "$Q/bin/inferscale" serve --device cuda --model "$MODEL" --data-dir /root/d --port 8000 --memory-pool-mb 16384 \
          --max-pending 512 "${EMBEDDER[@]}" > /root/serve.log 2>&1 < /dev/null &
        for _ in $(seq 1 120); do curl -sf localhost:8000/health >/dev/null 2>&1 && break; sleep 0.5; done
      fi
      timeout "${F1_SECONDS:-400}" python3 "$Q/locomo_eval.py" --base-url http://127.0.0.1:8000/v1 --data "$D" \
        --convs "${F1_CONVS:-conv-26}" --k "${F1_K:-5,10,20,50}" --w "${F1_W:-0,2,5}" ${F1_EXTRA:-} --concurrency "${F1_CONCURRENCY:-48}" \
        --out /root/f1 > "$OUT/f1.md" 2> "$OUT/f1.err"
      echo "f1 rc=$?"; tail -c 3000 "$OUT/f1.err" | tr '\r' '\n' | tail -n 5; cat "$OUT/f1.md"
      cp /root/f1/summary.json /root/f1/predictions.jsonl "$OUT/" 2>/dev/null
      tail -n 30 /root/serve.log > "$OUT/serve_tail.log" ;;
    *) echo "unknown stage $stage" ;;
  esac
  echo "stage $stage: $(( $(date +%s) - t0 )) s"
done
