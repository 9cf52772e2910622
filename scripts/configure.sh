#!/usr/bin/env bash
# Configures one of the build folders and prints its name. Usage: scripts/configure.sh KIND
#   release   ./build       the Release build (gcc): libraries, CLI, tests and benchmarks; a folder
#                           configured earlier with the CUDA backend (CI, scripts/gpu_bundle.sh) keeps it
#   address   ./build-asan  AddressSanitizer + UndefinedBehaviorSanitizer (clang): libraries, CLI,
#                           tests and benchmarks, and the libFuzzer targets, whose coverage every
#                           object carries, so the suite and the fuzzers share one build
#   thread    ./build-tsan  ThreadSanitizer (gcc): libraries, CLI and tests
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:?usage: scripts/configure.sh release|address|thread}
case "$kind" in
  release)
    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DINFERSCALE_TESTS=ON -DINFERSCALE_BENCH=ON >/dev/null
    echo build ;;
  address)
    if ! command -v clang++ >/dev/null || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
      echo "configure.sh: the address build needs clang with libFuzzer and OpenMP (scripts/setup.sh installs them:" \
           "clang libclang-rt-14-dev libomp-14-dev)" >&2
      exit 1
    fi
    CC=clang CXX=clang++ cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Release -DINFERSCALE_SANITIZE=address \
      -DINFERSCALE_FUZZ=ON -DINFERSCALE_TESTS=ON -DINFERSCALE_BENCH=ON >/dev/null
    echo build-asan ;;
  thread)
    cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Release -DINFERSCALE_SANITIZE=thread -DINFERSCALE_TESTS=ON \
      -DINFERSCALE_BENCH=OFF >/dev/null
    echo build-tsan ;;
  *) echo "configure.sh: release, address or thread, not '$kind'" >&2; exit 2 ;;
esac
