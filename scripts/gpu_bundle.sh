#!/usr/bin/env bash
# Builds the CUDA build here (sm_90) and gathers what the GPU machine needs into .gpu/cuda/:
# the test and benchmark binaries, the shared libraries they need that the GPU machine lacks
# (found with ldd; the binaries carry an $ORIGIN rpath), and gpu_run.sh. The folder is ignored
# by .gitignore (/.gpu/); copy it to the GPU host beside a checkout (kept under 64 MiB).
#
# Usage: scripts/gpu_bundle.sh [MIRROR_REPO_ROOT ...]
#   Each MIRROR_REPO_ROOT also gets a copy at <root>/.gpu/cuda (the checkout that goes to the GPU
#   host may be another worktree of this repository).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD=${BUILD:-build-cuda}
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
JOBS=${JOBS:-2}

cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DINFERSCALE_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC" \
      -DINFERSCALE_TESTS=ON -DINFERSCALE_BENCH=ON >/dev/null
cmake --build "$BUILD" -j"$JOBS" --target test_cuda bench_cuda_kernels bench_cuda_serving bench_memory_serving bench_quality_locomo bench_cuda_embedder bench_retrieval_locomo inferscale

DEST="$ROOT/.gpu/cuda"
rm -rf "$DEST"
mkdir -p "$DEST"
BINS=("$BUILD/tests/cuda/test_cuda" "$BUILD/bench/bench_cuda_kernels" "$BUILD/bench/bench_cuda_serving"
      "$BUILD/bench/bench_memory_serving" "$BUILD/bench/bench_quality_locomo" "$BUILD/bench/bench_retrieval_locomo")
cp "${BINS[@]}" "$DEST/"
for b in "${BINS[@]}"; do strip "$DEST/$(basename "$b")"; done  # symbols stay in the build; the carry is 64 MiB
cp scripts/gpu_env.sh scripts/gpu_run.sh scripts/gpu_serve_check.sh scripts/gpu_http_load.sh scripts/gpu_targets.sh "$DEST/"
# The HTTP load benchmark (gpu_http_load.sh runs it) travels as its two files; it also needs
# `inferscale` and data/ below (the 8B config, the tokenizer, locomo10.json).
cp bench/http_load.py bench/locomo_eval.py bench/targets_table.py "$DEST/"
# The product binary, stripped (22 MB -> ~5 MB), for gpu_serve_check.sh and gpu_http_load.sh.
strip -o "$DEST/inferscale" "$BUILD/inferscale"
# Inputs of the end-to-end memory benchmark (../shared does not travel to the GPU machine).
SHARED="$ROOT/../shared/data"
mkdir -p "$DEST/data"
cp "$SHARED/configs/Llama-3.1-8B.json" "$SHARED/configs/Mistral-7B-v0.3.json" "$SHARED/locomo/locomo10.json" \
   "$SHARED/tokenizers/mistral-v3/tokenizer.model.v3" "$DEST/data/"

# Libraries the GPU machine has (or that must come from its driver/toolkit): not copied (OpenBLAS
# alone is 36 MB of the 64 MB a call may carry).
SKIP='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|librt\.|libpthread\.|libstdc\+\+|libgcc_s|libcuda\.|libcublas|libcudart|libsqlite3|libpcre2-8|libxxhash|libzstd|libopenblas|libgfortran|libquadmath|libgomp)'
for b in "${BINS[@]}" "$BUILD/inferscale"; do
  ldd "$b" | awk '/=> \// {print $1, $3}' | while read -r name path; do
    if ! [[ "$name" =~ $SKIP ]]; then cp -L "$path" "$DEST/$name"; fi
  done
done
# A second, smaller bundle for the embedding-model benchmark (the Qwen3 tokenizer alone is 11 MB;
# both would not fit one call's 64 MiB): bash .gpu/emb/run.sh   (on the GPU host, in a copy of this checkout holding .gpu/emb).
EMB="$ROOT/.gpu/emb"
rm -rf "$EMB"
mkdir -p "$EMB"
cp "$BUILD/bench/bench_cuda_embedder" "$DEST"/libfmt.so.* "$DEST"/libspdlog.so.* "$DEST"/libsentencepiece.so.* \
   "$DEST"/libutf8proc.so.* "$EMB/"
cp "$SHARED/tokenizers/qwen3/tokenizer.json" "$EMB/qwen3-tokenizer.json"
cp "$SHARED/locomo/locomo10.json" "$EMB/"
cat > "$EMB/run.sh" <<'RUN'
#!/usr/bin/env bash
HERE=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:$HERE:${LD_LIBRARY_PATH:-}"
"$HERE/bench_cuda_embedder" --tokenizer "$HERE/qwen3-tokenizer.json" --locomo "$HERE/locomo10.json" "$@"
RUN
du -sh "$EMB"
# A third for scale out (gpu_scale_out.sh), on the GPU host `bash .gpu/so/gpu_scale_out.sh` with
# .gpu/so copied there: `inferscale`, HAProxy (Debian's) and the libraries of both the GPU machine
# may lack, the shipped routing rules, the load, proxy and moved-user benchmarks, the data.
SO="$ROOT/.gpu/so"
rm -rf "$SO"
mkdir -p "$SO/data"
cp "$DEST/inferscale" scripts/gpu_env.sh scripts/gpu_scale_out.sh bench/http_load.py bench/locomo_eval.py \
   bench/moved_users.py bench/proxy_latency.py "$SO/"
cp deploy/haproxy/inferscale.cfg "$SO/haproxy.cfg"
strip -o "$SO/haproxy" "$(command -v haproxy)"
cp "$DEST"/data/Llama-3.1-8B.json "$DEST"/data/tokenizer.model.v3 "$DEST"/data/locomo10.json "$SO/data/"
for b in "$BUILD/inferscale" "$(command -v haproxy)"; do
  ldd "$b" | awk '/=> \// {print $1, $3}' | while read -r name path; do
    if ! [[ "$name" =~ $SKIP ]]; then cp -L "$path" "$SO/$name"; fi
  done
done
du -sh "$SO"

echo "bundle: $DEST"
ls -la "$DEST"
du -sh "$DEST"

for mirror in "$@"; do
  mkdir -p "$mirror/.gpu"
  rm -rf "$mirror/.gpu/cuda"
  cp -r "$DEST" "$mirror/.gpu/cuda"
  echo "mirrored to $mirror/.gpu/cuda"
done
