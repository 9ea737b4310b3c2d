#!/usr/bin/env python3
"""Plots the training loss of several megacpp-train runs together, in the style of the trainer's loss.svg.

    scripts/plot-precision.py OUT.svg LABEL=RUN_DIR/metrics.jsonl [LABEL=...]

Each run's "loss" records (one per step) become one polyline; its "val_loss" records dots.
Used for docs/systems/precision.md (fp32 against bf16 mixed precision).
"""
import json
import sys

COLOURS = ["#2b5797", "#d65f5f", "#3a923a", "#8c613c"]
W, H, X0, X1, Y0, Y1 = 640, 380, 60, 620, 30, 330


def read(path):
    train, val = [], []
    with open(path) as f:
        for line in f:
            j = json.loads(line)
            if j.get("loss") is not None and "step" in j:
                train.append((j["step"], j["loss"]))
            if j.get("val_loss") is not None and "step" in j:
                val.append((j["step"], j["val_loss"]))
    return train, val


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    runs = []
    for arg in sys.argv[2:]:
        label, path = arg.split("=", 1)
        runs.append((label, *read(path)))
    points = [p for _, t, v in runs for p in t + v]
    xmax = max(x for x, _ in points)
    ymax = max(y for _, y in points) * 1.05
    sx = lambda x: X0 + (X1 - X0) * x / xmax
    sy = lambda y: Y1 - (Y1 - Y0) * y / ymax
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="monospace" font-size="11">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           '<text x="60" y="20" font-size="13">megacpp-train tiny (AAM): fp32 and bf16 mixed precision</text>',
           f'<line x1="{X0}" y1="{Y1}" x2="{X1}" y2="{Y1}" stroke="black"/>',
           f'<line x1="{X0}" y1="{Y0}" x2="{X0}" y2="{Y1}" stroke="black"/>']
    for i in range(5):
        y = ymax * i / 4
        out.append(f'<text x="5" y="{sy(y) + 4:.0f}">{y:.3f}</text>')
        out.append(f'<line x1="{X0}" y1="{sy(y):.0f}" x2="{X1}" y2="{sy(y):.0f}" stroke="#ddd"/>')
        x = xmax * i / 4
        out.append(f'<text x="{sx(x) - 10:.0f}" y="348">{x:.0f}</text>')
    out.append('<text x="300" y="370">step</text>')
    for i, (label, train, val) in enumerate(runs):
        c = COLOURS[i % len(COLOURS)]
        pts = " ".join(f"{sx(x):.2f},{sy(y):.2f}" for x, y in train)
        out.append(f'<polyline fill="none" stroke="{c}" stroke-width="1.5" points="{pts}"/>')
        for x, y in val:
            out.append(f'<circle cx="{sx(x):.2f}" cy="{sy(y):.2f}" r="3" fill="{c}"/>')
        out.append(f'<text x="420" y="{45 + 15 * i}" fill="{c}">{label}: train loss, dots val</text>')
    out.append("</svg>")
    with open(sys.argv[1], "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
