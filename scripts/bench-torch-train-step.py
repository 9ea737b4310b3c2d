#!/usr/bin/env python3
"""PyTorch's training step of bench/train_step's dense reference model, for comparison.

The model follows megacpp's dense "A" model (bench/train_step/train_step.cpp): V 8192, d 512,
4 blocks of pre-norm attention (8 query / 2 kv heads of 64, RoPE restarting at each document,
causal within documents of 128 tokens) and a relu^2 MLP of 4 d, final RMSNorm, head tied to the
embedding with the logit softcap 30, mean cross-entropy, AdamW. T 1024, B 4. Attention runs per
document (each row is 8 documents of 128 tokens), which is what the document mask leaves of
T x T, so neither side computes masked scores.

Run as the issue asks: OpenBLAS selected (libopenblas0-openmp), OMP_WAIT_POLICY=PASSIVE, two
threads. Precision: --precision bf16 (torch.autocast on the CPU, bf16 products, the default)
or fp32. Prints its configuration and ends with one JSON line, like megacpp's benches.

    OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=2 /usr/bin/python3 scripts/bench-torch-train-step.py
"""
import argparse
import json
import os
import platform
import statistics
import time

import torch
import torch.nn.functional as F

V, D, LAYERS, HEADS, KV_HEADS, T, B, DOC = 8192, 512, 4, 8, 2, 1024, 4, 128
HEAD_DIM = D // HEADS
SOFTCAP = 30.0


def rms_norm(x, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def rope_tables():
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float32) / HEAD_DIM))
    angles = torch.outer(torch.arange(DOC, dtype=torch.float32), inv_freq)  # positions restart per document
    return angles.cos(), angles.sin()


def rope(x, cos, sin):  # x (..., DOC, HEAD_DIM): rotate pairs (i, i + HEAD_DIM / 2)
    half = HEAD_DIM // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.wq = torch.nn.Linear(D, HEADS * HEAD_DIM, bias=False)
        self.wk = torch.nn.Linear(D, KV_HEADS * HEAD_DIM, bias=False)
        self.wv = torch.nn.Linear(D, KV_HEADS * HEAD_DIM, bias=False)
        self.wo = torch.nn.Linear(HEADS * HEAD_DIM, D, bias=False)
        self.fc = torch.nn.Linear(D, 4 * D, bias=False)
        self.proj = torch.nn.Linear(4 * D, D, bias=False)
        self.register_buffer("mask", torch.ones(DOC, DOC, dtype=torch.bool).tril())

    def attention(self, x, cos, sin):
        n = B * (T // DOC)  # documents
        q = self.wq(x).view(n, DOC, HEADS, HEAD_DIM).transpose(1, 2)
        k = self.wk(x).view(n, DOC, KV_HEADS, HEAD_DIM).transpose(1, 2)
        v = self.wv(x).view(n, DOC, KV_HEADS, HEAD_DIM).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        k = k.repeat_interleave(HEADS // KV_HEADS, dim=1)
        v = v.repeat_interleave(HEADS // KV_HEADS, dim=1)
        scores = (q @ k.transpose(-1, -2)) * (HEAD_DIM ** -0.5)
        p = scores.float().masked_fill(~self.mask, float("-inf")).softmax(-1)
        o = (p.to(v.dtype) @ v).transpose(1, 2).reshape(B, T, D)
        return self.wo(o)

    def forward(self, x, cos, sin):
        x = x + self.attention(rms_norm(x), cos, sin)
        return x + self.proj(F.relu(self.fc(rms_norm(x))).square())


class DenseLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.Parameter(torch.randn(V, D) * (2.5 / D))
        self.blocks = torch.nn.ModuleList(Block() for _ in range(LAYERS))

    def forward(self, ids, targets, cos, sin):
        x = F.embedding(ids, self.embedding)
        for block in self.blocks:
            x = block(x, cos, sin)
        logits = F.linear(rms_norm(x), self.embedding)
        logits = SOFTCAP * torch.tanh(logits.float() / SOFTCAP)
        return F.cross_entropy(logits.view(-1, V), targets.view(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=8, help="timed steps (after 2 warm-up steps)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print("bench:         torch_train_step")
    print(f"configuration: {args.precision}, V {V}, d {D}, {LAYERS} layers, {HEADS}/{KV_HEADS} heads, T {T}, B {B}, "
          f"{T // DOC} documents per row, AdamW; torch.autocast(cpu, bfloat16) for bf16")
    print(f"torch:         {torch.__version__}, {args.threads} threads, OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}, "
          f"libblas.so.3 -> {os.path.realpath('/usr/lib/x86_64-linux-gnu/libblas.so.3')}, "
          f"mkldnn {torch.backends.mkldnn.is_available()}")
    print(f"CPU:           {platform.processor() or platform.machine()}")
    model = DenseLM()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(1, V, (B, T))
    ids[:, ::DOC] = 0  # BOS every 128 tokens
    targets = torch.randint(1, V, (B, T))
    cos, sin = rope_tables()

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            loss = model(ids, targets, cos, sin)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    for _ in range(2):
        step()
    times = []
    loss = 0.0
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - t0)
    median = statistics.median(times)
    tokens_per_s = B * T / median
    print(f"step {median * 1e3:.1f} ms median of {args.steps} (min {min(times) * 1e3:.1f}), {tokens_per_s:.0f} tokens/s, "
          f"loss {loss:.4f}")
    print(json.dumps({"bench": "torch_train_step", "precision": args.precision, "threads": args.threads,
                      "tokens_per_s_dense": round(tokens_per_s, 1), "step_ms_median": round(median * 1e3, 1)}))


if __name__ == "__main__":
    main()
