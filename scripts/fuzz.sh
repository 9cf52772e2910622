#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/; clang, AddressSanitizer + UndefinedBehaviorSanitizer) in
# build-asan, writes their seed corpora (fuzz/make_corpus.py) and runs each target on its seeds,
# its kept corpus and the committed regression inputs (fuzz/regressions/<target>/).
#
# Usage: scripts/fuzz.sh [--seconds S | --minutes M] [--jobs J] [TARGET ...]
#   default: every target for 30 s, one at a time; --jobs J runs J targets at once.
# A crash, a sanitizer report, an input slower than 10 s or one that makes the process grow past
# 2 GB fails the run; its input is saved as build-asan/fuzzing/artifacts/<target>-crash-* (add it to
# fuzz/regressions/<target>/ with the fix and a unit test). New coverage is kept in
# build-asan/fuzzing/corpus/<target>, so later runs start from it. Prints each target's executions and
# coverage (libFuzzer's final "cov:" edges and "ft:" features).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=30
jobs=1
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --minutes) seconds=$(( $2 * 60 )); shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
all=(fuzz_gguf fuzz_safetensors fuzz_model_config fuzz_tokenizer_json fuzz_spm fuzz_chat_template fuzz_http fuzz_http_socket
     fuzz_mem0 fuzz_memory_rest fuzz_request_scope fuzz_api_keys fuzz_kv_file fuzz_imports)
[ ${#targets[@]} -eq 0 ] && targets=("${all[@]}")

# The ASan + UBSan build (clang), whose objects carry the fuzzers' coverage: the one the test
# suite runs under too (scripts/configure.sh address).
dir=$(./scripts/configure.sh address)
cmake --build "$dir" -j"$(nproc)" --target "${targets[@]}"
work=$dir/fuzzing
# The system Python: Debian's python3-xxhash gives the KV-file seed a valid checksum.
"$( [ -x /usr/bin/python3 ] && echo /usr/bin/python3 || echo python3 )" fuzz/make_corpus.py "$work/seeds" >/dev/null
mkdir -p "$work/artifacts" "$work/logs"

run_one() {
  local t=$1 corpus=$work/corpus/$1 log=$work/logs/$1.log
  mkdir -p "$corpus"
  local dirs=("$corpus" "$work/seeds/$t")
  [ -d "fuzz/regressions/$t" ] && dirs+=("fuzz/regressions/$t")
  # New inputs go to the first directory only; the seeds and regressions are read.
  if ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 FUZZ_TMPDIR=${FUZZ_TMPDIR:-} \
      "$dir/fuzz/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$work/artifacts/$t-" "${dirs[@]}" >"$log" 2>&1; then
    local runs cov
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
    cov=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | grep -o 'cov: [0-9]* ft: [0-9]*' | tail -1 || true)
    echo "fuzz: $t ok: $runs executions in ${seconds} s, ${cov:-cov ?}"
  else
    echo "fuzz: $t FAILED (log $log):"
    grep -E "ERROR|SUMMARY|runtime error|uncaught|Test unit written" "$log" | head -8
    return 1
  fi
}
export -f run_one
export seconds dir work
printf '%s\n' "${targets[@]}" | xargs -P "$jobs" -I{} bash -c 'run_one {}'
