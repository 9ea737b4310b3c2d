"""same_losses.py NAME GPU_METRICS CPU_METRICS [RELATIVE]: the two runs' losses agree to RELATIVE
(default 1e-4).

Compares every training loss and every validation loss of two megacpp-train metrics.jsonl files
(cuda_train.sh: the same run on the GPU and the CPU), step by step, and needs at least one
validation loss and one training loss after the first update (the first step's training loss
alone is a weak check: it comes out the same for every tiny model of the registry).
"""
import json
import sys

name, gpu_path, cpu_path = sys.argv[1:4]
relative = float(sys.argv[4]) if len(sys.argv) > 4 else 1e-4


def losses(path):
    records = [json.loads(line) for line in open(path)]
    return [(r["step"], key, r[key]) for r in records for key in ("val_loss", "loss") if key in r]


gpu, cpu = losses(gpu_path), losses(cpu_path)
print(f"{name}: GPU {gpu}\n{name}: CPU {cpu}")
assert [(s, k) for s, k, _ in gpu] == [(s, k) for s, k, _ in cpu], "the runs logged different losses"
assert any(k == "val_loss" for _, k, _ in gpu) and any(k == "loss" and s > 1 for s, k, _ in gpu), "too few losses"
for (step, key, g), (_, _, c) in zip(gpu, cpu):
    assert abs(g - c) <= relative * abs(c), f"step {step} {key}: GPU {g!r}, CPU {c!r} (relative {relative})"
print(f"{name}: {len(gpu)} losses agree to {relative}")
