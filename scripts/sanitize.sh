#!/usr/bin/env bash
# The CPU test suite under sanitizers (CMake's INFERSCALE_SANITIZE), each in a build folder of
# its own:
#   scripts/sanitize.sh address [ctest args...]   AddressSanitizer + UndefinedBehaviorSanitizer over
#                                                 every CPU test (build-asan); any report fails its test
#   scripts/sanitize.sh thread [ctest args...]    ThreadSanitizer over the tests that run threads
#                                                 against each other (build-tsan): the engine
#                                                 thread, HTTP threads, the background encoder,
#                                                 concurrent store writers
# The server tests run the sanitized `inferscale` binary too (tests start it by path).
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:?usage: scripts/sanitize.sh address|thread [ctest args...]}
shift
case "$kind" in
  address) dir=build-asan; select=(-LE cuda) ;;
  thread)
    dir=build-tsan
    # The suites whose tests run threads against each other.
    select=(-LE cuda -R '^(ServerAsyncEngine|ServerConnections|ServerHttp|ServerHttpOverload|ServerMemory|ServerMemoryBackground|ServerAuth)\.|Concurrent|Threads')
    ;;
  *) echo "sanitize.sh: address or thread, not '$kind'" >&2; exit 2 ;;
esac
./scripts/setup.sh
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DINFERSCALE_SANITIZE="$kind" -DINFERSCALE_TESTS=ON -DINFERSCALE_BENCH=OFF >/dev/null
cmake --build "$dir" -j"$(nproc)"
# Reports abort the process (a failing test) and name the stack; leaks count as reports.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/scripts/tsan.supp}
# libgomp is not instrumented either: the join at the end of an OpenMP region is invisible, so every
# read of a region's results after it would be reported. Under TSan, OpenMP regions run on their
# calling thread (the code is the same; only its worker threads are not checked).
if [ "$kind" = thread ]; then export OMP_NUM_THREADS=1; fi
ctest --test-dir "$dir" --output-on-failure --no-tests=error -j"$(nproc)" "${select[@]}" "$@"
