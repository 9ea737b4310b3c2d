#!/usr/bin/env bash
# tests/torch/check_torch_loader.sh TORCH_REFERENCE SCRIPT OUT_DIR
# Writes megacpp's checkpoints and logits (TORCH_REFERENCE OUT_DIR), then has SCRIPT (scripts/
# megacpp_torch.py) rebuild every model in PyTorch and compare. The interpreter is the first of
# $MEGACPP_TORCH_PYTHON, python3 and /usr/bin/python3 that imports torch; with none the test exits
# 77, which CTest reports as skipped (Debian: apt-get install python3-torch).
set -euo pipefail
reference=$1 script=$2 out=$3
python=""
for candidate in "${MEGACPP_TORCH_PYTHON:-}" python3 /usr/bin/python3; do
  [ -n "$candidate" ] || continue
  if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import torch' >/dev/null 2>&1; then
    python=$candidate
    break
  fi
done
if [ -z "$python" ]; then
  echo "SKIPPED: no python3 here imports torch (tried \$MEGACPP_TORCH_PYTHON, python3, /usr/bin/python3);" \
       "install python3-torch (scripts/install-deps.sh does) to run the PyTorch loader's check"
  exit 77
fi
rm -rf "$out"
"$reference" "$out"
"$python" "$script" check "$out" --tolerance 1e-5
