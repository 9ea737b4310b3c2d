#!/usr/bin/env bash
# mpi_train.sh TRAIN_EXE RUN_MPI OUT: megacpp-train under `mpirun -np 2` (tests/dist/run_mpi.sh).
# 1. A data-parallel run of a few steps succeeds; rank 0 alone prints (one summary line) and writes
#    metrics.jsonl (with a validation loss) and the final checkpoint.
# 2. An MoE model (tiny_moe) trains data-parallel too, logging the global batch's expert load.
# 3. ReDo in a data-parallel run (the ranks average their activation statistics): it recycles and
#    the run finishes.
# 4. A rank that fails (--debug_fail_rank 1) ends the whole job with a non-zero status and its
#    message, within the timeout rather than hanging; so does a rank that hangs without an error
#    (--debug_hang_rank 1), through the other rank's --collective_timeout.
# 5. The same run with --zero1 (optimizer state sharded over the ranks, gradients reduce-scattered
#    to their owners, the clip's sharded form) prints the state per rank and writes bitwise the
#    weights of 1., its optimizer state as one shard per rank and a
#    manifest. A --zero1 run stopped at step 2 resumes at np 2 to bitwise the final weights of
#    the uninterrupted --zero1 run, and at np 1 to bitwise its next step's loss.
# Exits 77 (skipped) without mpirun.
set -uo pipefail
exe="$1" run_mpi="$2" out="$3"
command -v mpirun >/dev/null || command -v mpiexec >/dev/null || { echo "no mpirun: skipped"; exit 77; }
rm -rf "$out"
fail() { echo "FAILED: $*"; exit 1; }

log="$(timeout 240 bash "$run_mpi" 2 "$exe" --steps 4 --eval_every 2 --val_tokens 2048 --out "$out/ok" --sample_tokens 0 2>&1)"
status=$?
echo "$log"
[[ $status == 0 ]] || fail "the data-parallel run exited with $status"
[[ "$(grep -c '^data parallel: 2 ranks' <<<"$log")" == 1 ]] || fail "expected one 'data parallel: 2 ranks' line (rank 0 alone prints)"
[[ "$(grep -c '^trained 4 steps' <<<"$log")" == 1 ]] || fail "expected one 'trained 4 steps' line"
[[ -f "$out/ok/metrics.jsonl" ]] || fail "no metrics.jsonl"
[[ "$(grep -c '"val_loss"' "$out/ok/metrics.jsonl")" -ge 2 ]] || fail "metrics.jsonl lacks validation losses"
[[ -e "$out/ok/latest" ]] || fail "no checkpoint"

log="$(timeout 300 bash "$run_mpi" 2 "$exe" --model tiny_moe --steps 2 --eval_every 2 --val_tokens 2048 --out "$out/moe" --sample_tokens 0 2>&1)"
status=$?
echo "$log"
[[ $status == 0 ]] || fail "the data-parallel MoE run exited with $status"
[[ "$(grep -c '"expert_load_max"' "$out/moe/metrics.jsonl")" == 2 ]] || fail "the MoE run's metrics lack expert_load_max"

log="$(timeout 300 bash "$run_mpi" 2 "$exe" --steps 4 --redo_every 2 --eval_every 4 --val_tokens 2048 --out "$out/redo" --sample_tokens 0 2>&1)"
status=$?
echo "$log"
[[ $status == 0 ]] || fail "the data-parallel ReDo run exited with $status"
[[ "$(grep -c '"intervention":"redo"' "$out/redo/metrics.jsonl")" == 2 ]] || fail "expected 2 ReDo records in metrics.jsonl"

# failing_run NAME WHAT MESSAGE [flags...]: a run that must end the whole job with a non-zero
# status (not the 240 s timeout) and print MESSAGE.
failing_run() {
  local name="$1" what="$2" message="$3"
  shift 3
  log="$(timeout 240 bash "$run_mpi" 2 "$exe" --steps 4 --out "$out/$name" --sample_tokens 0 "$@" 2>&1)"
  status=$?
  echo "$log"
  [[ $status != 0 ]] || fail "$what did not fail the job"
  [[ $status != 124 ]] || fail "the job hung after $what (timeout)"
  grep -q "$message" <<<"$log" || fail "after $what, the message '$message' is missing"
}
failing_run fail "a failing rank" "rank 1 fails on purpose" --debug_fail_rank 1
grep -q "aborting the MPI job" <<<"$log" || fail "the abort is not reported"
# A rank that hangs without an error (--debug_hang_rank 1, asleep before step 2): rank 0 waits in
# the step's first collective for --collective_timeout seconds, then ends the job naming it.
failing_run hang "a hung rank" "no completion after 3 s (the collective timeout)" --debug_hang_rank 1 --collective_timeout 3
zero1_run() {  # zero1_run NP OUT [flags...]: the tiny model to step 4 under --zero1 at NP ranks
  local np="$1" dir="$2"
  shift 2
  if [[ "$np" == 1 ]]; then
    timeout 240 "$exe" --steps 4 --eval_every 2 --val_tokens 2048 --out "$dir" --sample_tokens 0 --zero1 "$@" 2>&1
  else
    timeout 240 bash "$run_mpi" "$np" "$exe" --steps 4 --eval_every 2 --val_tokens 2048 --out "$dir" --sample_tokens 0 --zero1 "$@" 2>&1
  fi
}
has_shards() {  # has_shards DIR: a sharded optimizer set of 2 ranks and no whole-state file
  [[ -f "$1/optimizer.manifest.json" ]] || fail "$1 has no optimizer.manifest.json"
  for r in 0 1; do
    [[ -f "$1/optimizer.rank0000$r-of-00002.safetensors" ]] || fail "$1 lacks rank $r's optimizer shard"
  done
  [[ ! -e "$1/optimizer.safetensors" ]] || fail "$1 holds the whole optimizer state as well as the shards"
}
log="$(zero1_run 2 "$out/zero1")"
status=$?
echo "$log"
[[ $status == 0 ]] || fail "the --zero1 run exited with $status"
[[ "$(grep -c '^optimizer state per rank: .*ZeRO-1: sharded over the ranks' <<<"$log")" == 1 ]] ||
  fail "expected one 'optimizer state per rank ... ZeRO-1' line"
grep -q 'reduce-scattered to their owners (ZeRO-1)' <<<"$log" || fail "--zero1 at np 2 does not reduce-scatter the gradients"
final="$out/zero1/step_00000004"
cmp "$out/ok/step_00000004/model.safetensors" "$final/model.safetensors" || fail "--zero1 wrote different weights than the unsharded run"
has_shards "$final"
echo "optimizer bytes written at np 2 --zero1: rank 0 $(stat -c %s "$final/optimizer.rank00000-of-00002.safetensors")," \
  "rank 1 $(stat -c %s "$final/optimizer.rank00001-of-00002.safetensors"); unsharded file $(stat -c %s "$out/ok/step_00000004/optimizer.safetensors")"
# Stopped at step 2 (a sharded checkpoint), then resumed to step 4 at np 2: the final weights
# are bitwise those of the uninterrupted --zero1 run. Resumed at np 1 (accumulating the two
# ranks' micro-batches, which read the same tokens in the same order), the first resumed step's
# loss is bitwise the uninterrupted run's (the weights, data position and targets were restored
# exactly), but the weights after it are not bitwise: the embedding's scatter-add backward (and
# Mamba-3's bias sums) add micro-batch 2's per-token contributions one by one onto micro-batch
# 1's gradient in the same buffer, where two ranks each sum their own from zero and the
# all-reduce adds the two sums; the global norm clip then spreads that rounding to every
# parameter (docs/systems/distributed.md "Checkpoints across world sizes").
step_loss() { grep "\"step\":$2," "$1/metrics.jsonl" | grep -o '"loss":[^,]*'; }
log="$(zero1_run 2 "$out/zero1_stop" --stop_at_step 2)"
status=$?
echo "$log"
[[ $status == 0 ]] || fail "the --zero1 run stopped at step 2 exited with $status"
has_shards "$out/zero1_stop/step_00000002"
log="$(zero1_run 2 "$out/zero1_w2" --resume "$out/zero1_stop")"
status=$?
echo "$log"
[[ $status == 0 ]] || fail "resuming the sharded checkpoint at world size 2 exited with $status"
[[ "$(grep -c '^trained' <<<"$log")" == 1 ]] || fail "the resumed world-2 run did not finish"
cmp "$final/model.safetensors" "$out/zero1_w2/step_00000004/model.safetensors" ||
  fail "resumed at np 2, the weights differ from the uninterrupted --zero1 run"
has_shards "$out/zero1_w2/step_00000004"
log="$(zero1_run 1 "$out/zero1_w1" --resume "$out/zero1_stop")"
status=$?
echo "$log"
[[ $status == 0 ]] || fail "resuming the sharded checkpoint at world size 1 exited with $status"
grep -q 'nothing to shard' <<<"$log" || fail "--zero1 at world size 1 does not say it is a no-op"
[[ -n "$(step_loss "$out/zero1" 3)" && "$(step_loss "$out/zero1_w1" 3)" == "$(step_loss "$out/zero1" 3)" ]] ||
  fail "resumed at np 1, step 3's loss $(step_loss "$out/zero1_w1" 3) is not the uninterrupted run's $(step_loss "$out/zero1" 3)"
[[ -f "$out/zero1_w1/step_00000004/optimizer.safetensors" ]] || fail "the world-1 run did not write optimizer.safetensors"
echo "mpi_train: passed"
