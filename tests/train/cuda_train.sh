#!/usr/bin/env bash
# cuda_train.sh TRAIN_EXE GENERATE_EXE OUT: megacpp-train --device cuda on the built-in corpus.
# 1. Without a usable GPU (or in a build without the CUDA backend) the run stops at once with
#    exit 2 and a message naming the device; the test then reports itself skipped (77), never
#    passed.
# 2. An fp32 run on the GPU gives the CPU's losses to 1e-4 relative (same_losses.py): the validation
#    loss of the initial weights, and each step's training loss, the update's included. (The first
#    step's training loss alone is a weak check: it comes out the same for every tiny model of the
#    registry; tests/cuda's model step holds the gradients to 1e-5.)
# 3. A bf16 run (the default precision on the GPU) learns: --require_improvement, its summary
#    names the device, every step's loss is finite.
# 4. Stopped at step 3 and resumed, it finishes its 6 steps with bitwise the losses of the
#    uninterrupted run of 3. (the CUDA backend sums in a fixed order: no floating-point atomics);
#    the checkpoint, written from device memory, is read back by megacpp-generate on the CPU and
#    continues a prompt.
# 5. megacpp-generate --device cuda continues it with the CPU's greedy tokens (and --verify).
# 6. The MTP, MoE and NAM56R-layout models train 2 fp32 steps on the GPU with the CPU's losses.
# 7. The MoE model trains 2 bf16 steps on the GPU (its experts' grouped products on bf16 operands,
#    GroupedGemm through cuBLAS GemmEx) with the CPU's bf16 losses to 1e-2 relative: both round
#    the same operands to bf16, but their fp32 sums run in different orders, and an activation
#    whose sum moves by an ulp can round to a neighbouring bf16 (2^-8 relative) downstream.
set -uo pipefail
exe="$1" generate="$2" out="$3"
rm -rf "$out"
mkdir -p "$out"
fail() { echo "FAILED: $*"; exit 1; }
short=(--steps 6 --warmup_steps 2 --eval_every 3 --val_tokens 4096 --sample_tokens 20 --seq_len 64 --micro_batch 8
       --total_batch_size 1024)

log="$("$exe" --device cuda "${short[@]}" --out "$out/bf16" --require_improvement 2>&1)"
status=$?
echo "$log"
if grep -q "built without the CUDA backend" <<<"$log"; then
  [[ $status == 2 ]] || fail "a build without CUDA: expected exit 2 (bad flag), got $status"
  echo "megacpp-train has no CUDA translation units: skipped"
  exit 77
fi
if grep -q "no CUDA device is usable" <<<"$log"; then
  [[ $status == 2 ]] || fail "no GPU: expected exit 2 (bad flag), got $status"
  echo "no usable CUDA device: skipped"
  exit 77
fi
[[ $status == 0 ]] || fail "the bf16 run on the GPU exited with $status"
grep -q "device cuda (" <<<"$log" || fail "the summary does not name the GPU"
grep -q "precision bf16" <<<"$log" || fail "the GPU run's default precision is not bf16"
python3 - "$out/bf16/metrics.jsonl" <<'EOF' || fail "non-finite or missing losses in the bf16 run"
import json, math, sys
losses = [r["loss"] for r in map(json.loads, open(sys.argv[1])) if "loss" in r]
assert len(losses) == 6 and all(math.isfinite(l) for l in losses), losses
EOF

"$exe" --device cuda --precision fp32 --steps 2 --warmup_steps 1 --eval_every 2 --val_tokens 4096 --sample_tokens 0 --seq_len 64 \
  --micro_batch 8 --total_batch_size 1024 --out "$out/gpu32" >"$out/gpu32.log" 2>&1 || { cat "$out/gpu32.log"; fail "fp32 GPU step"; }
"$exe" --device cpu --precision fp32 --steps 2 --warmup_steps 1 --eval_every 2 --val_tokens 4096 --sample_tokens 0 --seq_len 64 \
  --micro_batch 8 --total_batch_size 1024 --out "$out/cpu32" >"$out/cpu32.log" 2>&1 || { cat "$out/cpu32.log"; fail "fp32 CPU step"; }
python3 "$(dirname "$0")/same_losses.py" tiny "$out/gpu32/metrics.jsonl" "$out/cpu32/metrics.jsonl" ||
  fail "the GPU's losses are not the CPU's"

"$exe" --device cuda "${short[@]}" --out "$out/resumed" --stop_at_step 3 >"$out/stop.log" 2>&1 || { cat "$out/stop.log"; fail "the stopped run"; }
"$exe" --device cuda "${short[@]}" --out "$out/resumed" --resume >"$out/resume.log" 2>&1 || { cat "$out/resume.log"; fail "the resumed run"; }
grep -q "resumed from .* at step 3" "$out/resume.log" || fail "the resumed run did not start at step 3"
grep -q "^trained 3 steps" "$out/resume.log" || fail "the resumed run did not train its last 3 steps"
python3 - "$out/bf16/metrics.jsonl" "$out/resumed/metrics.jsonl" <<'EOF' || fail "the resumed run's losses differ"
import json, sys
def losses(path):
    return [(r["step"], r["loss"]) for r in map(json.loads, open(path)) if "loss" in r]
straight, resumed = losses(sys.argv[1]), losses(sys.argv[2])
print("uninterrupted", straight, "\nresumed", resumed)
assert straight == resumed
EOF
sample="$("$generate" --checkpoint "$out/resumed" --prompt "int " --tokens 16 --temperature 0 2>&1)" ||
  { echo "$sample"; fail "megacpp-generate could not continue from the GPU's checkpoint"; }
echo "$sample"
# 5. megacpp-generate --device cuda: the GPU decodes the same greedy continuation as the CPU, and
#    its cached decoding equals its full forward at every step (--verify).
gpu_sample="$("$generate" --device cuda --checkpoint "$out/resumed" --prompt "int " --tokens 16 --temperature 0 --verify \
  --stats 2>"$out/generate_gpu.err")" || { cat "$out/generate_gpu.err"; echo "$gpu_sample"; fail "megacpp-generate --device cuda"; }
cat "$out/generate_gpu.err"
echo "$gpu_sample"
grep -q "on cuda (" "$out/generate_gpu.err" || fail "megacpp-generate --device cuda did not run on the GPU"
grep -q "^verify: .* cached decoding == full forward" <<<"$gpu_sample" || fail "--verify on the GPU did not pass"
[[ "$(sed '$d' <<<"$gpu_sample")" == "$sample" ]] || fail "the GPU's greedy continuation differs from the CPU's"
# 6. Every letter on the GPU: the MTP head, the MoE layer ("E") and NAM56R's 56-layer layout (with
#    M2RNN, "R") train 2 fp32 steps with the CPU's losses.
for model in tiny_mtp tiny_moe nam56r_tiny; do
  for device in cuda cpu; do
    "$exe" --model "$model" --device "$device" --precision fp32 --steps 2 --warmup_steps 1 --eval_every 2 \
      --val_tokens 1024 --sample_tokens 0 --seq_len 64 --micro_batch 4 --total_batch_size 256 \
      --out "$out/$model-$device" >"$out/$model-$device.log" 2>&1 || { cat "$out/$model-$device.log"; fail "$model on $device"; }
  done
  python3 "$(dirname "$0")/same_losses.py" "$model" "$out/$model-cuda/metrics.jsonl" "$out/$model-cpu/metrics.jsonl" ||
    fail "$model: the GPU's losses are not the CPU's"
done
for device in cuda cpu; do
  "$exe" --model tiny_moe --device "$device" --precision bf16 --steps 2 --warmup_steps 1 --eval_every 2 \
    --val_tokens 1024 --sample_tokens 0 --seq_len 64 --micro_batch 4 --total_batch_size 256 \
    --out "$out/tiny_moe_bf16-$device" >"$out/tiny_moe_bf16-$device.log" 2>&1 ||
    { cat "$out/tiny_moe_bf16-$device.log"; fail "tiny_moe in bf16 on $device"; }
done
python3 "$(dirname "$0")/same_losses.py" tiny_moe_bf16 "$out/tiny_moe_bf16-cuda/metrics.jsonl" \
  "$out/tiny_moe_bf16-cpu/metrics.jsonl" 1e-2 || fail "tiny_moe in bf16: the GPU's losses are not near the CPU's"
echo "cuda_train: all checks passed"
