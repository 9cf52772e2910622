#!/usr/bin/env bash
# Builds and runs every test (ctest). Usage: [SANITIZE=address|thread] scripts/test.sh [ctest args...]
#   no SANITIZE       ./build, Release (gcc); a folder configured with the CUDA backend keeps it,
#                     and its GPU tests (label `cuda`) run only where an NVIDIA GPU is present.
#   SANITIZE=address  ./build-asan: the whole suite under AddressSanitizer + UndefinedBehaviorSanitizer
#                     (clang; any report aborts its test; leaks count). CI runs this.
#   SANITIZE=thread   ./build-tsan: ThreadSanitizer (scripts/sanitize.sh thread picks the tests)
# Server tests start the `inferscale` binary of the same build, so they run sanitized too.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
dir=$(./scripts/configure.sh "${SANITIZE:-release}")
t0=$(date +%s)
cmake --build "$dir" -j"$(nproc)"
echo "test.sh: $dir built in $(( $(date +%s) - t0 )) s"
GPU_FILTER=(-LE cuda)
if [ -z "${SANITIZE:-}" ] && command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then GPU_FILTER=(); fi
# Reports abort the process (a failing test) and name the stack.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/scripts/tsan.supp}
# libgomp is not instrumented for TSan: the join at the end of an OpenMP region is invisible, so
# every read of a region's results after it would be reported. Under TSan, OpenMP regions run on
# their calling thread (the code is the same; only its worker threads are not checked).
if [ "${SANITIZE:-}" = thread ]; then export OMP_NUM_THREADS=1; fi
ctest --test-dir "$dir" --output-on-failure --no-tests=error -j"$(nproc)" "${GPU_FILTER[@]}" "$@"
