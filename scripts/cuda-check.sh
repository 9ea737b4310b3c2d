#!/usr/bin/env bash
# Runs everything CUDA on a machine with a GPU, in the order that spends its time best: the tests
# first (a kernel that fails them makes its figures meaningless), then the benches, whose last
# output line is their JSON figures (docs/systems/cuda.md records them).
#
#   scripts/cuda-check.sh [TEST_BUILD_DIR] [BENCH_BUILD_DIR]      (defaults: build/test build/default)
#
# Build both presets first (cmake --workflow --preset test / default: nvcc compiles every CUDA
# translation unit). Exits non-zero if any test fails or any binary is missing; the benches' JSON
# lines are gathered in $CUDA_CHECK_OUT (default: cuda-check.jsonl in the current directory). Last,
# where ncu is installed, one Mamba step's and one train step's kernels, by time (below).
set -u
test_dir=${1:-build/test}
bench_dir=${2:-build/default}
out=${CUDA_CHECK_OUT:-cuda-check.jsonl}
status=0
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

run() {  # run NAME PATH [ARGS...]: runs one binary, prints its wall time, remembers a failure
  local name=$1 path=$2
  shift 2
  if [ ! -x "$path" ]; then
    echo "cuda-check: $name: $path is missing (build its preset first)"
    status=1
    return
  fi
  echo "== $name"
  local start=$SECONDS
  "$path" "$@" | tee "/tmp/cuda-check-$name.log"
  local rc=${PIPESTATUS[0]}
  echo "-- $name: exit $rc, $((SECONDS - start)) s"
  [ "$rc" -eq 0 ] || status=1
  # Without a GPU the binaries say so and exit 0 (CTest reports them skipped): not a pass here.
  if grep -q "no CUDA device" "/tmp/cuda-check-$name.log"; then
    echo "cuda-check: $name found no CUDA device: nothing was checked"
    status=1
  fi
}

run cuda_tests "$test_dir/tests/cuda/cuda_tests"
run cuda_layer_tests "$test_dir/tests/cuda_layers/cuda_layer_tests"
[ -x "$test_dir/tests/dist/nccl_tests" ] && run nccl_tests "$test_dir/tests/dist/nccl_tests"
# megacpp-train --device cuda: the default preset compiles its CUDA translation units (the test
# preset leaves them out to save CI time); its exit 77 (no GPU) says "no CUDA device": a failure here.
train_exe="$bench_dir/examples/megacpp-train"
if [ -x "$train_exe" ]; then
  run train_cuda "$(dirname "$0")/../tests/train/cuda_train.sh" "$train_exe" "$bench_dir/examples/megacpp-generate" \
    "${TMPDIR:-/tmp}/cuda-check-train"
else
  echo "cuda-check: train_cuda: $train_exe is missing (build the default preset first)"
  status=1
fi
: > "$out"
for bench in attention mamba m2rnn moe reduce train_step; do
  run "bench_${bench}_cuda" "$bench_dir/bench/$bench/bench_${bench}_cuda"
  [ -f "/tmp/cuda-check-bench_${bench}_cuda.log" ] && tail -n 1 "/tmp/cuda-check-bench_${bench}_cuda.log" >> "$out"
done
# Where one step's GPU time goes, kernel by kernel (ncu, where it is installed; CUDA_CHECK_PROFILE=0
# skips it): the Mamba-3 layer at T = 4K and the dense bf16 train step, each bench with
# MEGACPP_PROFILE_STEP=1 (one step inside cudaProfilerStart/Stop), summed by scripts/kernel-times.py.
ncu_exe=$(command -v ncu || { [ -x /usr/local/cuda/bin/ncu ] && echo /usr/local/cuda/bin/ncu; })
if [ -n "$ncu_exe" ] && [ "${CUDA_CHECK_PROFILE:-1}" != 0 ]; then
  for bench in mamba train_step; do
    exe="$bench_dir/bench/$bench/bench_${bench}_cuda"
    [ -x "$exe" ] || continue
    echo "== profile: bench_${bench}_cuda, one step's kernels (ncu)"
    log="/tmp/cuda-check-profile-$bench.csv"
    MEGACPP_PROFILE_STEP=1 timeout 600 "$ncu_exe" --profile-from-start off --metrics gpu__time_duration.sum --csv \
      "$exe" > "$log" 2>&1 || echo "cuda-check: ncu on bench_${bench}_cuda exited non-zero (log: $log)"
    python3 "$(dirname "$0")/kernel-times.py" "$log" || status=1
  done
else
  echo "cuda-check: no ncu here (or CUDA_CHECK_PROFILE=0): no per-kernel breakdown"
fi
echo "cuda-check: figures in $out; $([ $status -eq 0 ] && echo 'every binary passed' || echo 'FAILURES above')"
exit $status
