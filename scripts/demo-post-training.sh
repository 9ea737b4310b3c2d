#!/usr/bin/env bash
# The recipe's three stages on the tiny model, end to end (docs/post-training.md):
#   1. pretraining on the built-in corpus (the repository's own C++ sources),
#   2. SFT on examples/sft/cpp_functions.jsonl (C++ functions and edits, none of them an
#      evaluation problem), from the pretrained checkpoint,
#   3. GSPO on the 20 shipped evaluation problems, from SFT, with CodeRL's graded execution reward
#      (a model this small never passes a test, so the binary reward would carry no signal),
# with pass@1 of the shipped problems (10 samples each) after every stage, then the table and
# the plot of scripts/plot-post-training.py.
#
#   scripts/demo-post-training.sh [BUILD_DIR] [OUT_DIR]     (defaults: build/default, runs/demo)
#
# Extra flags for every stage may be given in DEMO_FLAGS (e.g. DEMO_FLAGS="--precision fp32").
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$here/build/default}"
out="${2:-$here/runs/demo}"
train="$build/examples/megacpp-train"
[[ -x "$train" ]] || { echo "demo-post-training: $train not built (cmake --preset default && cmake --build build/default)" >&2; exit 1; }
mkdir -p "$out"
read -r -a extra <<< "${DEMO_FLAGS:-}"
pass_eval=(--eval_samples 10 --eval_temperature 0.8 --sample_tokens 0)
set -x
"$train" --out "$out/base" --steps 600 --eval_pass_every 600 "${pass_eval[@]}" "${extra[@]}"
"$train" --out "$out/sft" --init "$out/base" --sft "$here/examples/sft/cpp_functions.jsonl" --steps 150 \
  --warmup_steps 10 --lr_matrix 0.005 --lr_embedding 0.003 --lr_scalar 0.001 --eval_every 25 --eval_pass_every 150 \
  "${pass_eval[@]}" "${extra[@]}"
"$train" --out "$out/gspo" --init "$out/sft" --gspo --gspo_reward coderl --steps 40 --gspo_group 8 --gspo_prompts 4 --gspo_max_tokens 96 \
  --warmup_steps 0 --lr_schedule constant --lr_matrix 0.002 --lr_embedding 0.001 --lr_scalar 0.0005 \
  --eval_pass_every 20 "${pass_eval[@]}" "${extra[@]}"
set +x
python3 "$here/scripts/plot-post-training.py" "$out/post-training.svg" \
  pretraining="$out/base" SFT="$out/sft" GSPO="$out/gspo" | tee "$out/post-training.md"
echo "table $out/post-training.md, plot $out/post-training.svg"
