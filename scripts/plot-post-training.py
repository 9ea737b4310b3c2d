#!/usr/bin/env python3
"""Tabulates and plots a pretrain -> SFT -> GSPO pipeline of megacpp-train runs.

    scripts/plot-post-training.py OUT.svg STAGE=RUN_DIR [STAGE=RUN_DIR ...]

Reads each run's metrics.jsonl and prints a Markdown table, one row per stage: its steps, the
last training loss, the last validation loss, and the stage's last pass@k evaluation (pass@1,
pass@10, the share of candidates that compiled, CodeBLEU's weighted n-gram match). OUT.svg
draws, on one step axis with the stages one after the other, the training loss (pretraining and
SFT, left axis), the share of GSPO's rollouts that compiled (line, right axis, 0 to 1) and every
evaluation's pass@1 and compile rate (dots, right axis), with the stage boundaries marked.
Used by scripts/demo-post-training.sh for docs/post-training.md.
"""
import json
import sys

W, H, X0, X1, Y0, Y1 = 720, 380, 60, 660, 30, 330
LOSS, PASS, REWARD, COMPILED = "#2b5797", "#d65f5f", "#3a923a", "#8c613c"


def read(path):
    records = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                records.append(json.loads(line))
    return records


def last(records, key):
    values = [r[key] for r in records if isinstance(r.get(key), (int, float))]
    return values[-1] if values else None


def fmt(value, digits=3):
    return "-" if value is None else f"{value:.{digits}f}"


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out, stages = sys.argv[1], []
    for arg in sys.argv[2:]:
        name, _, run = arg.partition("=")
        stages.append((name, read(run + "/metrics.jsonl")))

    print("| stage | steps | train loss (last) | val loss (last) | pass@1 | pass@10 | compiled | weighted n-gram match |")
    print("|---|---|---|---|---|---|---|---|")
    for name, records in stages:
        steps = max((r["step"] for r in records if "step" in r), default=0)
        evals = [r for r in records if isinstance(r.get("pass@1"), (int, float))]
        e = evals[-1] if evals else {}
        print(f"| {name} | {steps} | {fmt(last(records, 'loss'))} | {fmt(last(records, 'val_loss'))} | "
              f"{fmt(e.get('pass@1'))} | {fmt(e.get('pass@10'))} | {fmt(e.get('compile_rate'))} | "
              f"{fmt(e.get('weighted_ngram_match'))} |")

    # One step axis: each stage starts where the previous one ended.
    losses, passes, compiles, rewards, bounds, offset = [], [], [], [], [], 0
    for name, records in stages:
        steps = max((r["step"] for r in records if "step" in r), default=0)
        for r in records:
            if isinstance(r.get("loss"), (int, float)):
                losses.append((offset + r["step"], r["loss"]))
            if isinstance(r.get("pass@1"), (int, float)):
                passes.append((offset + r["step"], r["pass@1"]))
                if isinstance(r.get("compile_rate"), (int, float)):
                    compiles.append((offset + r["step"], r["compile_rate"]))
            elif isinstance(r.get("compile_rate"), (int, float)):  # a GSPO step's rollouts
                rewards.append((offset + r["step"], r["compile_rate"]))
        bounds.append((offset, offset + steps, name))
        offset += steps
    x_max = max(offset, 1)
    loss_max = max((v for _, v in losses), default=1.0)
    sx = lambda x: X0 + (X1 - X0) * x / x_max
    sy_loss = lambda y: Y1 - (Y1 - Y0) * y / loss_max
    sy_frac = lambda y: Y1 - (Y1 - Y0) * y

    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H + 40}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H + 40}" fill="white"/>',
           f'<line x1="{X0}" y1="{Y1}" x2="{X1}" y2="{Y1}" stroke="black"/>',
           f'<line x1="{X0}" y1="{Y0}" x2="{X0}" y2="{Y1}" stroke="black"/>',
           f'<line x1="{X1}" y1="{Y0}" x2="{X1}" y2="{Y1}" stroke="black"/>',
           f'<text x="{X0 - 8}" y="{Y0 + 4}" text-anchor="end">{loss_max:.2f}</text>',
           f'<text x="{X0 - 8}" y="{Y1 + 4}" text-anchor="end">0</text>',
           f'<text x="{X1 + 6}" y="{Y0 + 4}">1</text><text x="{X1 + 6}" y="{Y1 + 4}">0</text>',
           f'<text x="{(X0 + X1) / 2}" y="{Y1 + 30}" text-anchor="middle">optimizer steps, stage after stage</text>']
    for start, end, name in bounds:
        svg.append(f'<line x1="{sx(start):.1f}" y1="{Y0}" x2="{sx(start):.1f}" y2="{Y1}" stroke="#999" stroke-dasharray="4 3"/>')
        svg.append(f'<text x="{sx((start + end) / 2):.1f}" y="{Y0 - 10}" text-anchor="middle">{name}</text>')
    if losses:
        points = " ".join(f"{sx(x):.1f},{sy_loss(y):.1f}" for x, y in losses)
        svg.append(f'<polyline fill="none" stroke="{LOSS}" stroke-width="1.5" points="{points}"/>')
    if rewards:
        points = " ".join(f"{sx(x):.1f},{sy_frac(y):.1f}" for x, y in rewards)
        svg.append(f'<polyline fill="none" stroke="{REWARD}" stroke-width="1.5" points="{points}"/>')
    for x, y in compiles:
        svg.append(f'<rect x="{sx(x) - 4:.1f}" y="{sy_frac(y) - 4:.1f}" width="8" height="8" fill="{COMPILED}"/>')
    for x, y in passes:
        svg.append(f'<circle cx="{sx(x):.1f}" cy="{sy_frac(y):.1f}" r="4" fill="{PASS}"/>')
    legend = [(LOSS, "training loss (nats, left)"), (REWARD, "GSPO rollouts compiled"),
              (COMPILED, "evaluation: compiled"), (PASS, "evaluation: pass@1")]
    for i, (colour, label) in enumerate(legend):
        y = H + 10
        x = X0 + 165 * i
        svg.append(f'<rect x="{x}" y="{y}" width="12" height="12" fill="{colour}"/>')
        svg.append(f'<text x="{x + 18}" y="{y + 11}">{label}</text>')
    svg.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
