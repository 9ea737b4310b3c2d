#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz, the `fuzz` preset: clang, ASan + UBSan), writes the
# seed corpora with fuzz_seeds, and runs each fuzzer for SECONDS (default 30).
#
#   scripts/fuzz.sh [SECONDS] [READER...]        READER: safetensors shard json tokenizer (default: all)
#   MEGACPP_FUZZ_FLAGS="-runs=1000000" scripts/fuzz.sh 3600    stop each at a million inputs (or 1 h)
#
# Each fuzzer starts from build/fuzz/corpus/READER (kept between runs, so a longer run continues
# where the last one stopped) plus the fresh seeds. Exit status 1 when a fuzzer found anything: the
# input is saved as build/fuzz/findings/READER-crash-* (or -timeout-, -oom-, -leak-) and the log
# build/fuzz/logs/READER.log holds the report; reproduce with build/fuzz/tests/fuzz/fuzz_READER FILE.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-30}"
shift || true
readers=("$@")
if [ ${#readers[@]} -eq 0 ]; then readers=(safetensors shard json tokenizer); fi
case "$seconds" in (''|*[!0-9]*) echo "fuzz.sh: SECONDS must be a positive integer, got '$seconds'" >&2; exit 2;; esac

cmake --preset fuzz >/dev/null
cmake --build --preset fuzz

build=build/fuzz
rm -rf "$build/seeds"
"$build/tests/fuzz/fuzz_seeds" "$build/seeds"
mkdir -p "$build/findings" "$build/logs"

status=0
for reader in "${readers[@]}"; do
  fuzzer="$build/tests/fuzz/fuzz_$reader"
  [ -x "$fuzzer" ] || { echo "fuzz.sh: no fuzzer for '$reader' (safetensors shard json tokenizer)" >&2; exit 2; }
  corpus="$build/corpus/$reader"
  mkdir -p "$corpus"
  log="$build/logs/$reader.log"
  echo "== fuzz_$reader for ${seconds} s ${MEGACPP_FUZZ_FLAGS:-}"
  # -timeout: an input that takes 30 s is a finding (a parser loop); -rss_limit_mb bounds a
  # reader that allocates what a corrupt size field claims. -max_len fits every seed.
  # shellcheck disable=SC2086
  if "$fuzzer" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 -max_len=8192 -print_final_stats=1 \
       -artifact_prefix="$build/findings/$reader-" ${MEGACPP_FUZZ_FLAGS:-} "$corpus" "$build/seeds/$reader" >"$log" 2>&1; then
    grep -E '^(Done|stat::number_of_executed_units|stat::average_exec_per_sec)|DONE' "$log" || true
  else
    status=1
    echo "fuzz_$reader FOUND A PROBLEM (log: $log):"
    grep -E 'ERROR|runtime error|SUMMARY|Test unit written|fuzz property' "$log" | head -20 || true
  fi
done
exit "$status"
