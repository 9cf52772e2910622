#!/usr/bin/env bash
# Gathers what the GPU machine needs for the real-model runs (scripts/gpu_quality.sh) into
# .gpu/m1, .gpu/m2 (SmolLM2's 98 MB GGUF in two parts: one device call carries at most 64 MiB, and
# the 42 MB part 1 travels with .gpu/q, the working tree beside them) and
# .gpu/q (stripped CUDA-build binaries and the libraries the machine lacks, xz-compressed, plus
# LoCoMo, the eval harness and its nltk wheels). All under /.gpu/, which git ignores.
#   bash scripts/gpu_quality.sh stash   (on the GPU host, in a copy of this checkout holding .gpu/m1 and .gpu/q)
#   bash scripts/gpu_quality.sh parity kl   (on the GPU host, in a copy of this checkout holding .gpu/m2 and .gpu/q)   (within 30 s)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-cuda}
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$MODEL" ] || { echo "no $MODEL (scripts/fetch_models.sh)"; exit 1; }
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DINFERSCALE_CUDA=ON -DCMAKE_CUDA_COMPILER="${NVCC:-/usr/local/cuda/bin/nvcc}" \
      -DINFERSCALE_TESTS=ON -DINFERSCALE_BENCH=ON >/dev/null
cmake --build "$BUILD" -j"${JOBS:-2}" --target test_cuda inferscale bench_quality_locomo bench_memory_serving
rm -rf .gpu/m1 .gpu/m2 .gpu/q .gpu/e .gpu/e1 .gpu/e2
mkdir -p .gpu/m1 .gpu/m2 .gpu/q .gpu/e1 .gpu/e2
# split_at FILE N A B: FILE's first N bytes into A, the rest into B.
split_at() { head -c "$2" "$1" > "$3"; tail -c +"$(( $2 + 1 ))" "$1" > "$4"; }
# The sentence encoder of hybrid retrieval (scripts/fetch_models.sh), when fetched: an 80 MB
# archive, in two halves that travel in two calls.
if [ -d models/all-MiniLM-L6-v2 ]; then
  tar -C models -cJf .gpu/minilm.tar.xz all-MiniLM-L6-v2
  split_at .gpu/minilm.tar.xz $(( ($(stat -c %s .gpu/minilm.tar.xz) + 1) / 2 )) .gpu/e1/part .gpu/e2/part
  rm .gpu/minilm.tar.xz
fi
split_at "$MODEL" 42000000 .gpu/m1/part1 .gpu/m2/part2
S=$(mktemp -d)
mkdir -p "$S/bin"
for b in "$BUILD/inferscale" "$BUILD/tests/cuda/test_cuda" "$BUILD/bench/bench_quality_locomo" "$BUILD/bench/bench_memory_serving"; do
  strip -o "$S/bin/$(basename "$b")" "$b"
done
# The libraries the GPU machine has, or that come from its driver/toolkit, stay behind (as gpu_bundle.sh).
SKIP='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|librt\.|libpthread\.|libstdc\+\+|libgcc_s|libcuda\.|libcublas|libcudart|libsqlite3|libpcre2-8|libxxhash|libzstd|libopenblas|libgfortran|libquadmath|libgomp)'
for b in "$S"/bin/inferscale "$S"/bin/test_cuda "$S"/bin/bench_quality_locomo "$S"/bin/bench_memory_serving; do
  ldd "$b" | awk '/=> \// {print $1, $3}' | while read -r name path; do
    if ! [[ "$name" =~ $SKIP ]] && [ ! -e "$S/bin/$name" ]; then cp -L "$path" "$S/bin/$name"; fi
  done
done
cp ../shared/data/locomo/locomo10.json bench/locomo_eval.py "$S/"
# The ttft stage's model shape and tokenizer (random weights: only the shapes and token counts matter).
cp ../shared/data/configs/Llama-3.1-8B.json ../shared/data/tokenizers/mistral-v3/tokenizer.model.v3 "$S/"
mkdir -p "$S/whl"
.venv/bin/pip download -q --no-deps -d "$S/whl" nltk==3.10.4 defusedxml
tar -C "$S" -cJf .gpu/q/bundle.tar.xz .
rm -rf "$S"
du -sh .gpu/m1 .gpu/m2 .gpu/q .gpu/e1 .gpu/e2
