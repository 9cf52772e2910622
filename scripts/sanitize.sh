#!/usr/bin/env bash
# The CPU test suite under sanitizers (scripts/test.sh with SANITIZE), each in a build folder of
# its own (scripts/configure.sh):
#   scripts/sanitize.sh address [ctest args...]   AddressSanitizer + UndefinedBehaviorSanitizer over
#                                                 every CPU test (build-asan, clang); any report
#                                                 fails its test. CI runs it.
#   scripts/sanitize.sh thread [ctest args...]    ThreadSanitizer over the tests that run threads
#                                                 against each other (build-tsan): the engine
#                                                 thread, HTTP threads, the background encoder,
#                                                 concurrent store writers
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:?usage: scripts/sanitize.sh address|thread [ctest args...]}
shift
case "$kind" in
  address) select=() ;;
  # The suites whose tests run threads against each other.
  thread) select=(-R '^(ServerAsyncEngine|ServerConnections|ServerHttp|ServerHttpOverload|ServerMemory|ServerMemoryBackground|ServerAuth)\.|Concurrent|Threads') ;;
  *) echo "sanitize.sh: address or thread, not '$kind'" >&2; exit 2 ;;
esac
SANITIZE=$kind exec ./scripts/test.sh "${select[@]}" "$@"
