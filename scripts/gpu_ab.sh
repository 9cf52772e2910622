#!/usr/bin/env bash
# Side-by-side GPU benchmarks of git revisions: builds `bench_cuda_serving` (and
# `bench_memory_serving`) at each REF in a worktree under /tmp (CUDA on, tests off), takes the
# working tree's from build-cuda (run scripts/gpu_bundle.sh first), strips them into
# .gpu/ab/<name>/ and writes .gpu/ab/run.sh, which runs the binaries alternately, ROUNDS times,
# in one device call, so that every ratio is measured on one machine in one run:
#
#   scripts/gpu_ab.sh 2673c2e            # base = 2673c2e, work = this working tree
#   bash .gpu/ab/run.sh   (on the GPU host, in a copy of this checkout holding .gpu/cuda and .gpu/ab)
#   AB_ARGS=--decode-only AB_ENGINE=1 bash .gpu/ab/run.sh   (on the GPU host, in a copy of this checkout holding the bundle folders)
#
# run.sh: AB_ARGS (bench_cuda_serving's arguments), AB_ROUNDS (default 2), AB_ENGINE=1 (also
# bench_memory_serving at Llama-3.1-8B shapes, 100 users, k = 50, once per binary). Logs go to
# $OUT/serving_<name>.log (and engine_<name>.log); the key rows are printed as it goes. The
# worktrees stay for the next build (`git worktree remove /tmp/inferscale-ab-<sha>` drops one).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
JOBS=${JOBS:-2}
[ $# -ge 1 ] || { echo "usage: scripts/gpu_ab.sh REF [REF ...]" >&2; exit 2; }
[ -x build-cuda/bench/bench_cuda_serving ] || { echo "build-cuda has no bench_cuda_serving: run scripts/gpu_bundle.sh first" >&2; exit 2; }

AB="$ROOT/.gpu/ab"
rm -rf "$AB"
mkdir -p "$AB"
take() {  # take NAME BUILD_DIR
  mkdir -p "$AB/$1"
  for b in bench_cuda_serving bench_memory_serving; do strip -o "$AB/$1/$b" "$2/bench/$b"; done
}
names=()
for ref in "$@"; do
  sha=$(git rev-parse --short "$ref")
  wt="/tmp/inferscale-ab-$sha"
  [ -d "$wt" ] || git worktree add -f --detach "$wt" "$sha" >/dev/null
  cmake -S "$wt" -B "$wt/build-cuda" -DCMAKE_BUILD_TYPE=Release -DINFERSCALE_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC" \
        -DINFERSCALE_TESTS=OFF -DINFERSCALE_BENCH=ON >/dev/null
  cmake --build "$wt/build-cuda" -j"$JOBS" --target bench_cuda_serving bench_memory_serving >/dev/null
  take "$sha" "$wt/build-cuda"
  names+=("$sha")
done
take work build-cuda
names+=(work)

cat > "$AB/run.sh" <<RUN
#!/usr/bin/env bash
# Written by scripts/gpu_ab.sh: ${names[*]} side by side (the libraries come from .gpu/cuda).
HERE=\$(cd "\$(dirname "\$0")" && pwd)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:\$HERE/../cuda
OUT=\${OUT:-/tmp/gpu_out}
mkdir -p "\$OUT"
D=\$HERE/../cuda/data
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
for r in \$(seq "\${AB_ROUNDS:-2}"); do
  for v in ${names[*]}; do
    echo "== \$v, round \$r"
    timeout 120 "\$HERE/\$v/bench_cuda_serving" \${AB_ARGS:-} > /tmp/ab.log 2>&1; echo "rc=\$?"
    cat /tmp/ab.log >> "\$OUT/serving_\$v.log"
    grep -E "^\\| (1|32) \\| tensor-core tiles \\| on \\| on|^\\| 50 \\| 1532|^(decode|question)" /tmp/ab.log
  done
done
if [ -n "\${AB_ENGINE:-}" ]; then
  for v in ${names[*]}; do
    echo "== engine \$v"
    timeout 150 "\$HERE/\$v/bench_memory_serving" --device cuda --config "\$D/Llama-3.1-8B.json" \\
      --tokenizer "\$D/tokenizer.model.v3" --locomo "\$D/locomo10.json" --questions 20 --users 100 --max-tokens 32 \\
      --kv-cache-mb 40960 > /tmp/ab.log 2>&1; echo "rc=\$?"
    cat /tmp/ab.log >> "\$OUT/engine_\$v.log"
    grep -E "^\\| 50 \\||^\\| (inject|text) \\||facts/s" /tmp/ab.log
  done
fi
RUN
chmod +x "$AB/run.sh"
du -sh "$AB"
echo "next, on the GPU host (with .gpu/cuda and .gpu/ab copied there): bash .gpu/ab/run.sh"
