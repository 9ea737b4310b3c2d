#!/usr/bin/env bash
# mpi_train.sh TRAIN_EXE RUN_MPI OUT: megacpp-train under `mpirun -np 2` (tests/dist/run_mpi.sh).
# 1. A data-parallel run of a few steps succeeds; rank 0 alone prints (one summary line) and writes
#    metrics.jsonl (with a validation loss) and the final checkpoint.
# 2. An MoE model (tiny_moe) trains data-parallel too, logging the global batch's expert load.
# 3. ReDo in a data-parallel run (the ranks average their activation statistics): it recycles and
#    the run finishes.
# 4. A rank that fails (--debug_fail_rank 1) ends the whole job with a non-zero status and its
#    message, within the timeout rather than hanging.
# 3. The same run with --zero1 (optimizer state sharded over the ranks) prints the state per rank
#    and writes bitwise the checkpoint of 1. (weights and optimizer state: rank 0 gathers the
#    shards before writing); that checkpoint resumes at world size 1 and at 2 with --zero1.
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

log="$(timeout 240 bash "$run_mpi" 2 "$exe" --steps 4 --out "$out/fail" --sample_tokens 0 --debug_fail_rank 1 2>&1)"
status=$?
echo "$log"
[[ $status != 0 ]] || fail "a failing rank did not fail the job"
[[ $status != 124 ]] || fail "the job hung after a rank failed (timeout)"
grep -q "rank 1 fails on purpose" <<<"$log" || fail "the failing rank's message is missing"
grep -q "aborting the MPI job" <<<"$log" || fail "the abort is not reported"
log="$(timeout 240 bash "$run_mpi" 2 "$exe" --steps 4 --eval_every 2 --val_tokens 2048 --out "$out/zero1" --sample_tokens 0 --zero1 2>&1)"
status=$?
echo "$log"
[[ $status == 0 ]] || fail "the --zero1 run exited with $status"
[[ "$(grep -c '^optimizer state per rank: .*ZeRO-1: sharded over the ranks' <<<"$log")" == 1 ]] ||
  fail "expected one 'optimizer state per rank ... ZeRO-1' line"
for f in model.safetensors optimizer.safetensors; do
  cmp "$out/ok/step_00000004/$f" "$out/zero1/step_00000004/$f" || fail "--zero1 wrote a different $f than the unsharded run"
done
log="$(timeout 240 "$exe" --steps 6 --eval_every 2 --val_tokens 2048 --resume "$out/zero1" --out "$out/zero1_w1" --sample_tokens 0 --zero1 2>&1)"
status=$?
echo "$log"
[[ $status == 0 ]] || fail "resuming the --zero1 checkpoint at world size 1 exited with $status"
grep -q 'nothing to shard' <<<"$log" || fail "--zero1 at world size 1 does not say it is a no-op"
log="$(timeout 240 bash "$run_mpi" 2 "$exe" --steps 6 --eval_every 2 --val_tokens 2048 --resume "$out/zero1" --out "$out/zero1_w2" --sample_tokens 0 --zero1 2>&1)"
status=$?
echo "$log"
[[ $status == 0 ]] || fail "resuming the --zero1 checkpoint at world size 2 exited with $status"
[[ "$(grep -c '^trained' <<<"$log")" == 1 ]] || fail "the resumed world-2 run did not finish"
echo "mpi_train: passed"
