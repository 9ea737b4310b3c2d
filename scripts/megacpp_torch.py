#!/usr/bin/env python3
"""Load a megacpp checkpoint into a plain PyTorch module and run it (docs/pytorch.md).

    import megacpp_torch
    model = megacpp_torch.load("runs/tiny/step_00000300")     # a checkpoint directory, or its model.safetensors
    logits = model(torch.tensor([[256, 72, 101, 108]]), bos_id=256)   # (batch, seq, vocab)

    python3 scripts/megacpp_torch.py logits runs/tiny/step_00000300 --tokens 256 72 101 108 --bos 256
    python3 scripts/megacpp_torch.py check DIR           # the test: compare with megacpp's own logits

Needs PyTorch only (Debian: python3-torch); the safetensors file is read directly (8-byte
little-endian header length, JSON header, raw little-endian data; F32, F64, F16 and BF16 tensors,
converted to the module's dtype on load). The network is built from the checkpoint's config.json
(or the "megacpp.config" metadata of model.safetensors): the letter of every layer and each
letter's configuration. Every layer is a straightforward, sequential reference of the math in
megacpp's headers, written for clarity, not speed:

  'A'  pre-norm GQA attention (RoPE rotate-half with the saved base and YaRN, optional QK-norm,
       score scale and softcap, causal, sliding window, masked to the token's document) + MLP
  'M'  pre-norm Mamba-3 (SISO or MIMO rank R, heavy-tail or softplus A rule, data-dependent
       rotary angles, trapezoidal recurrence, optional per-head output norm) + MLP
  'R'  pre-norm M2RNN (document-masked causal conv, matrix state with tanh transition) + MLP
  'E'  pre-norm mixture of experts (softmax or sigmoid+bias routing, top-k, shared experts)
  MLP  relu(x)^2 between two bias-free projections; RMSNorm without gain; tied head with the
       final logit softcap; MTP depth 1 (mtp_logits) when the checkpoint has it.

One file on purpose (longer than the project's ~500-line rule for headers): it is meant to be
copied next to a checkpoint and used where megacpp is not installed.

Documents: like megacpp's trainer, a row may pack several documents, each starting with the BOS
token; pass bos_id so attention, positions and recurrent states restart at each one (bos_id=None:
each row is one document).
"""

import argparse
import json
import math
import os
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

SAFETENSORS_DTYPES = {
    "F32": torch.float32,
    "F64": torch.float64,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
}


class CheckpointError(Exception):
    """A checkpoint this script cannot read or build a model from."""


# ---- safetensors ------------------------------------------------------------------------------


def read_safetensors(path):
    """(tensors, metadata) of a safetensors file: {name: tensor} in the file's dtypes."""
    if sys.byteorder != "little":
        raise CheckpointError("safetensors data is little-endian; this reader runs on little-endian hosts only")
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise CheckpointError(f"{path}: {len(data)} bytes, too short for a safetensors header")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise CheckpointError(f"{path}: header length {n} exceeds the file ({len(data)} bytes)")
    header = json.loads(data[8 : 8 + n].decode("utf-8"))
    metadata = header.pop("__metadata__", {}) or {}
    base = 8 + n
    tensors = {}
    for name, info in header.items():
        dtype = SAFETENSORS_DTYPES.get(info["dtype"])
        if dtype is None:
            raise CheckpointError(f"{path}: tensor {name!r} has dtype {info['dtype']}, not one of {sorted(SAFETENSORS_DTYPES)}")
        begin, end = info["data_offsets"]
        shape = list(info["shape"])
        numel = math.prod(shape)
        itemsize = torch.tensor([], dtype=dtype).element_size()
        if not (0 <= begin <= end <= len(data) - base) or end - begin != numel * itemsize:
            raise CheckpointError(f"{path}: tensor {name!r} has data_offsets [{begin}, {end}] that do not hold {shape} {info['dtype']}")
        raw = bytearray(data[base + begin : base + end])
        flat = torch.frombuffer(raw, dtype=dtype) if numel else torch.empty(0, dtype=dtype)
        tensors[name] = flat.reshape(shape)
    return tensors, metadata


def read_checkpoint(path):
    """(tensors, config) of a checkpoint directory (model.safetensors + config.json) or a model.safetensors file."""
    weights = os.path.join(path, "model.safetensors") if os.path.isdir(path) else path
    if not os.path.isfile(weights):
        raise CheckpointError(f"{weights}: no such file (give a checkpoint directory holding model.safetensors and "
                              "config.json, or the model.safetensors file)")
    tensors, metadata = read_safetensors(weights)
    config_path = os.path.join(os.path.dirname(weights), "config.json")
    if os.path.exists(config_path):
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)
    elif "megacpp.config" in metadata:
        config = json.loads(metadata["megacpp.config"])
    else:
        raise CheckpointError(f"{weights}: no config.json beside it and no \"megacpp.config\" metadata (a checkpoint "
                              "from a megacpp older than its model config cannot be rebuilt)")
    if config.get("format") != "megacpp" or "letters" not in config:
        raise CheckpointError(f"{weights}: the model config has no per-letter configuration (\"letters\"); "
                              "save the checkpoint again with this megacpp")
    return tensors, config


# ---- shared pieces ----------------------------------------------------------------------------


def rmsnorm(x, eps, gain=None):
    """x / sqrt(mean(x^2) + eps) (* gain) over the last axis."""
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y * gain if gain is not None else y


def softcap(x, cap):
    """cap * tanh(x / cap); cap 0: x."""
    return cap * torch.tanh(x / cap) if cap > 0 else x


def softplus(x):
    """log(1 + exp(x)), x itself above 20 (megacpp's and PyTorch's threshold)."""
    return F.softplus(x, beta=1.0, threshold=20.0)


class Documents:
    """Document layout of a (batch, seq) token batch: a token equal to bos_id starts a document."""

    def __init__(self, ids, bos_id):
        batch, seq = ids.shape
        start = torch.zeros(batch, seq, dtype=torch.bool)
        if bos_id is not None:
            start |= ids.cpu() == bos_id
        start[:, 0] = True
        self.start = start  # (batch, seq): the token opens a document
        self.doc = torch.cumsum(start.long(), dim=1)  # (batch, seq): document index within the row
        pos = torch.zeros(batch, seq, dtype=torch.long)
        for b in range(batch):
            p = 0
            for t in range(seq):
                p = 0 if start[b, t] else p + 1
                pos[b, t] = p
        self.pos = pos  # (batch, seq): position within the document


class MLP(nn.Module):
    """proj(relu(fc(x))^2), no biases."""

    def __init__(self, d_model, hidden):
        super().__init__()
        self.fc = nn.Linear(d_model, hidden, bias=False)
        self.proj = nn.Linear(hidden, d_model, bias=False)

    def forward(self, x):
        return self.proj(F.relu(self.fc(x)).square())


# ---- 'A': attention ---------------------------------------------------------------------------


def rope_frequencies(head_dim, theta, yarn):
    """inv_freq (head_dim / 2) as megacpp computes it (double, then rounded to float32), YaRN-extended."""
    out = []
    for d in range(head_dim // 2):
        inv = theta ** (-2.0 * d / head_dim)
        h = inv
        if yarn["factor"] > 1.0:
            rotations = yarn["original_context"] * inv / (2.0 * math.pi)
            gamma = min(max((rotations - yarn["beta_slow"]) / (yarn["beta_fast"] - yarn["beta_slow"]), 0.0), 1.0)
            h = (1.0 - gamma) * inv / yarn["factor"] + gamma * inv
        out.append(h)
    return torch.tensor(out, dtype=torch.float32)


class Attention(nn.Module):
    """GQA with RoPE, optional QK-norm, softcapped scores, causal + window + document mask."""

    def __init__(self, d_model, c):
        super().__init__()
        self.c = c
        H, Hkv, D = c["n_heads"], c["n_kv_heads"], c["head_dim"]
        self.wq = nn.Linear(d_model, H * D, bias=False)
        self.wk = nn.Linear(d_model, Hkv * D, bias=False)
        self.wv = nn.Linear(d_model, Hkv * D, bias=False)
        self.wo = nn.Linear(H * D, d_model, bias=False)
        # a plain attribute, not a buffer: Module.to(dtype) must not round megacpp's float32 table
        self.inv_freq = rope_frequencies(D, c["rope_theta"], c["yarn"]) if c["rope"] else None
        yarn_factor = 0.1 * math.log(c["yarn"]["factor"]) + 1.0 if c["rope"] and c["yarn"]["factor"] > 1.0 else 1.0
        self.scale = c["score_scale"] * yarn_factor * yarn_factor

    def rope(self, x, pos):
        # rotate-half: pairs (i, i + D/2) turn by pos * inv_freq_i
        half = x.shape[-1] // 2
        angle = pos.to(torch.float64)[..., None] * self.inv_freq.to(torch.float64)  # (B, T, D/2)
        cos = torch.cos(angle).to(x.dtype)[:, :, None, :]
        sin = torch.sin(angle).to(x.dtype)[:, :, None, :]
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

    def forward(self, x, docs):
        B, T, _ = x.shape
        c = self.c
        H, Hkv, D = c["n_heads"], c["n_kv_heads"], c["head_dim"]
        q = self.wq(x).view(B, T, H, D)
        k = self.wk(x).view(B, T, Hkv, D)
        v = self.wv(x).view(B, T, Hkv, D)
        if c["qk_norm"]:
            q, k = rmsnorm(q, c["qk_norm_eps"]), rmsnorm(k, c["qk_norm_eps"])
        if c["rope"]:
            q, k = self.rope(q, docs.pos), self.rope(k, docs.pos)
        group = H // Hkv  # query head h reads kv head h // group
        k = k.repeat_interleave(group, dim=2)
        v = v.repeat_interleave(group, dim=2)
        scores = torch.einsum("bthd,bshd->bhts", q, k) * self.scale
        scores = softcap(scores, c["softcap"])
        t = torch.arange(T)
        visible = t[:, None] >= t[None, :]  # (query, key): causal
        if c["window"] > 0:
            visible = visible & (t[:, None] - t[None, :] < c["window"])
        same_doc = docs.doc[:, :, None] == docs.doc[:, None, :]  # (B, T, T)
        mask = (visible[None] & same_doc)[:, None].to(x.device)  # (B, 1, T, T)
        scores = scores.masked_fill(~mask, float("-inf"))
        o = torch.einsum("bhts,bshd->bthd", torch.softmax(scores, dim=-1), v)
        return self.wo(o.reshape(B, T, H * D))


# ---- 'M': Mamba-3 -----------------------------------------------------------------------------


class Mamba3(nn.Module):
    """Mamba-3 (SISO or MIMO), the literal recurrence per token."""

    def __init__(self, d_model, c):
        super().__init__()
        self.c = c
        H, R, N, P, S = c["heads"], c["mimo_rank"], c["d_state"], c["headdim"], c["n_angles"]
        di = c["expand"] * d_model
        self.d_inner = di
        self.in_proj = nn.Linear(d_model, 2 * di + 2 * R * N + 3 * H + S, bias=False)
        self.dt_bias = nn.Parameter(torch.zeros(H))
        self.B_norm = nn.Parameter(torch.ones(N))
        self.C_norm = nn.Parameter(torch.ones(N))
        self.B_bias = nn.Parameter(torch.ones(H, R, N))
        self.C_bias = nn.Parameter(torch.ones(H, R, N))
        self.D = nn.Parameter(torch.ones(H))
        if R > 1:
            self.mimo_x = nn.Parameter(torch.ones(H, R, P))
            self.mimo_z = nn.Parameter(torch.ones(H, R, P))
            self.mimo_o = nn.Parameter(torch.ones(H, R, P))
        if c["outproj_norm"]:
            self.norm = nn.Parameter(torch.ones(di))
        self.out_proj = nn.Linear(di, d_model, bias=False)
        if c["a_activation"] not in ("heavy-tail", "softplus"):
            raise CheckpointError(f"Mamba-3 A activation {c['a_activation']!r} is not one of heavy-tail, softplus")

    def phi(self, x):
        if self.c["a_activation"] == "softplus":
            return softplus(x)
        return torch.where(x >= 0, 1.0 + x, 1.0 / (1.0 - x.clamp(max=0)))  # heavy-tail

    def rotate(self, x, cos, sin):
        # pairs (2i, 2i+1), i < S, turned by theta_i; x (B, H, R, N), cos/sin (B, H, S)
        S = cos.shape[-1]
        x0, x1 = x[..., 0 : 2 * S : 2], x[..., 1 : 2 * S : 2]
        c, s = cos[:, :, None, :], sin[:, :, None, :]
        y = x.clone()
        y[..., 0 : 2 * S : 2] = x0 * c - x1 * s
        y[..., 1 : 2 * S : 2] = x0 * s + x1 * c
        return y

    def forward(self, u, docs):
        c = self.c
        B, T, _ = u.shape
        H, R, N, P, S, di = c["heads"], c["mimo_rank"], c["d_state"], c["headdim"], c["n_angles"], self.d_inner
        z, x, Bm, Cm, dd_dt, dd_A, trap, angle = torch.split(self.in_proj(u), [di, di, R * N, R * N, H, H, H, S], dim=-1)
        Bn = rmsnorm(Bm.reshape(B, T, R, N), c["norm_eps"], self.B_norm)
        Cn = rmsnorm(Cm.reshape(B, T, R, N), c["norm_eps"], self.C_norm)
        dt = softplus(dd_dt + self.dt_bias)  # (B, T, H)
        A = torch.clamp(-self.phi(dd_A), max=-c["A_floor"])
        log_alpha = A * dt
        gamma = torch.sigmoid(trap) * dt
        shift = dt - gamma
        x = x.reshape(B, T, H, 1, P)
        v = x * self.mimo_x if R > 1 else x  # (B, T, H, R, P)
        state = u.new_zeros(B, H, N, P)
        theta = u.new_zeros(B, H, S)
        k_prev = u.new_zeros(B, H, R, N)
        v_prev = u.new_zeros(B, H, R, P)
        two_pi = 2.0 * math.pi
        ys = []
        for t in range(T):
            keep = (~docs.start[:, t]).to(u.dtype).to(u.device)  # 0 at a document's first token
            state = state * keep[:, None, None, None]
            theta = theta * keep[:, None, None]
            k_prev = k_prev * keep[:, None, None, None]
            v_prev = v_prev * keep[:, None, None, None]
            theta = theta + math.pi * torch.tanh(angle[:, t])[:, None, :] * dt[:, t][:, :, None]
            theta = theta - two_pi * torch.floor(theta / two_pi)
            cos, sin = torch.cos(theta), torch.sin(theta)
            k = self.rotate(Bn[:, t][:, None] + self.B_bias, cos, sin)  # (B, H, R, N)
            q = self.rotate(Cn[:, t][:, None] + self.C_bias, cos, sin)
            vt = v[:, t]  # (B, H, R, P)
            alpha = torch.exp(log_alpha[:, t])  # (B, H)
            beta = shift[:, t] * alpha
            state = (alpha[:, :, None, None] * state
                     + beta[:, :, None, None] * torch.einsum("bhrn,bhrp->bhnp", k_prev, v_prev)
                     + gamma[:, t][:, :, None, None] * torch.einsum("bhrn,bhrp->bhnp", k, vt))
            ys.append(torch.einsum("bhrn,bhnp->bhrp", q, state) + self.D[None, :, None, None] * vt)
            k_prev, v_prev = k, vt
        y = torch.stack(ys, dim=1)  # (B, T, H, R, P)
        if c["outproj_norm"]:
            y = rmsnorm(y, c["norm_eps"]) * self.norm.view(H, 1, P)
        if R > 1:
            zr = z.reshape(B, T, H, 1, P) * self.mimo_z
            gated = (y * F.silu(zr) * self.mimo_o).sum(dim=3).reshape(B, T, di)
        else:
            gated = y.reshape(B, T, di) * F.silu(z)
        return self.out_proj(gated)


# ---- 'R': M2RNN -------------------------------------------------------------------------------


class M2RNN(nn.Module):
    """M2RNN: document-masked causal conv, matrix state H_t = f H + (1 - f) tanh(H W + k v^T)."""

    def __init__(self, d_model, c):
        super().__init__()
        self.c = c
        H, K, V, W = c["heads"], c["k_head_dim"], c["v_head_dim"], c["conv_kernel"]
        self.conv_dim = H * (2 * K + V)
        self.in_proj = nn.Linear(d_model, self.conv_dim + H + H * V, bias=False)
        self.conv_weight = nn.Parameter(torch.zeros(self.conv_dim, W))
        self.conv_bias = nn.Parameter(torch.zeros(self.conv_dim))
        self.state_weight = nn.Parameter(torch.zeros(H, V, V))
        self.A_log = nn.Parameter(torch.zeros(H))
        self.dt_bias = nn.Parameter(torch.zeros(H))
        self.D = nn.Parameter(torch.ones(H, V))
        self.g_norm = nn.Parameter(torch.ones(H * V))
        self.out_proj = nn.Linear(H * V, d_model, bias=False)

    def conv(self, x, docs):
        # y[t] = bias + sum_j w[:, j] x[t - (W-1) + j], taps before the document's first token read 0
        W = self.c["conv_kernel"]
        y = self.conv_bias.expand_as(x).clone()
        pos = docs.pos.to(x.device)
        for j in range(W):
            lag = W - 1 - j
            shifted = torch.zeros_like(x)
            if lag == 0:
                shifted = x
            elif lag < x.shape[1]:
                shifted[:, lag:] = x[:, :-lag]
            visible = (pos >= lag).to(x.dtype)[..., None]
            y = y + self.conv_weight[:, j] * shifted * visible
        return y

    def forward(self, u, docs):
        c = self.c
        B, T, _ = u.shape
        H, K, V = c["heads"], c["k_head_dim"], c["v_head_dim"]
        C = self.conv_dim
        proj = self.in_proj(u)
        qkv = F.silu(self.conv(proj[..., :C], docs))
        q = qkv[..., : H * K].reshape(B, T, H, K)
        k = qkv[..., H * K : 2 * H * K].reshape(B, T, H, K)
        v = qkv[..., 2 * H * K :].reshape(B, T, H, V)
        f = torch.exp(-(softplus(proj[..., C : C + H] + self.dt_bias) * torch.exp(self.A_log)))  # (B, T, H)
        g = proj[..., C + H :]
        state = u.new_zeros(B, H, K, V)
        ys = []
        for t in range(T):
            keep = (~docs.start[:, t]).to(u.dtype).to(u.device)
            state = state * keep[:, None, None, None]
            pre = torch.einsum("bhk,bhv->bhkv", k[:, t], v[:, t]) + torch.einsum("zhka,hac->zhkc", state, self.state_weight)
            ft = f[:, t][:, :, None, None]
            state = ft * state + (1.0 - ft) * torch.tanh(pre)
            ys.append(torch.einsum("bhk,bhkv->bhv", q[:, t], state))
        y = torch.stack(ys, dim=1) + v * self.D  # (B, T, H, V)
        return self.out_proj(rmsnorm(y.reshape(B, T, H * V) * F.silu(g), c["norm_eps"], self.g_norm))


# ---- 'E': mixture of experts ------------------------------------------------------------------


class MoE(nn.Module):
    """Top-k routed experts (ReLU^2 MLPs), softmax or sigmoid+bias routing, optional shared experts."""

    def __init__(self, d_model, c):
        super().__init__()
        self.c = c
        if c["routing"] not in ("softmax_topk", "sigmoid_bias_topk"):
            raise CheckpointError(f"MoE routing {c['routing']!r} is not one of softmax_topk, sigmoid_bias_topk")
        self.router = nn.Linear(d_model, c["experts"], bias=False)
        self.experts = nn.ModuleList(MLP(d_model, c["expert_hidden"]) for _ in range(c["experts"]))
        if c["shared_experts"] > 0:
            self.shared = MLP(d_model, c["shared_experts"] * c["expert_hidden"])
        # the sigmoid rule's balancing bias (double in megacpp; the file's blocks.<i>.ffn.routing.bias,
        # set by load()), kept out of Module.to(dtype)
        self.routing_bias = torch.zeros(c["experts"], dtype=torch.float64)

    def forward(self, x):
        c = self.c
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        logits = self.router(x2)
        if c["routing"] == "softmax_topk":
            scores = torch.softmax(logits, dim=-1)
            key = scores.to(torch.float64)
        else:
            scores = torch.sigmoid(logits)
            key = scores.to(torch.float64) + self.routing_bias.to(x.device)
        # top-k, best first, ties to the lower expert index (a stable descending sort)
        chosen = torch.sort(key, dim=-1, descending=True, stable=True).indices[:, : c["top_k"]]
        gates = scores.gather(1, chosen)
        if c["normalize"]:
            gates = gates / gates.sum(-1, keepdim=True)
        outputs = torch.stack([expert(x2) for expert in self.experts], dim=1)  # (tokens, E, d)
        picked = outputs.gather(1, chosen[:, :, None].expand(-1, -1, shape[-1]))  # (tokens, k, d)
        y = (picked * gates[:, :, None]).sum(1)
        if c["shared_experts"] > 0:
            y = y + self.shared(x2)
        return y.reshape(shape)


# ---- blocks and the model ---------------------------------------------------------------------

MIXERS = {"attention": Attention, "mamba3": Mamba3, "m2rnn": M2RNN}


def build_ffn(d_model, c):
    if c["kind"] == "mlp":
        if c.get("activation", "relu2") != "relu2":
            raise CheckpointError(f"MLP activation {c['activation']!r} is not relu2")
        return MLP(d_model, c["hidden"])
    if c["kind"] == "moe":
        return MoE(d_model, c)
    raise CheckpointError(f"feed-forward kind {c['kind']!r} is not one this script builds (mlp, moe)")


class Block(nn.Module):
    """Pre-norm residual block: h = x + mixer(RMSNorm(x)); out = h + ffn(RMSNorm(h)); either may be absent."""

    def __init__(self, d_model, c):
        super().__init__()
        self.eps = c["norm_eps"]
        self.has_mixer = c["mixer"] is not None
        self.has_ffn = c["ffn"] is not None
        if self.has_mixer:
            kind = c["mixer"]["kind"]
            if kind not in MIXERS:
                raise CheckpointError(f"mixer kind {kind!r} is not one this script builds ({', '.join(MIXERS)})")
            self.mixer = MIXERS[kind](d_model, c["mixer"])
        if self.has_ffn:
            self.ffn = build_ffn(d_model, c["ffn"])

    def forward(self, x, docs):
        if self.has_mixer:
            x = x + self.mixer(rmsnorm(x, self.eps), docs)
        if self.has_ffn:
            x = x + self.ffn(rmsnorm(x, self.eps))
        return x


class MTP(nn.Module):
    """Multi-token prediction of depth 1: u = block(proj([h ; RMSNorm(E[next])]))."""

    def __init__(self, d_model, c):
        super().__init__()
        self.proj = nn.Linear(2 * d_model, d_model, bias=False)
        self.block = Block(d_model, c["block"])


class MegacppLM(nn.Module):
    """megacpp's LM: embedding, the blocks of config["layers"], RMSNorm, tied head, final softcap."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        d = config["d_model"]
        if not config.get("tied_embedding", True):
            raise CheckpointError("only tied embeddings are built (megacpp's LM ties its head to the embedding)")
        self.embedding = nn.Embedding(config["vocab"], d)
        layers = config["layers"]
        if len(layers) != config["n_layers"]:
            raise CheckpointError(f"config layers {layers!r} has {len(layers)} letters for n_layers {config['n_layers']}")
        for letter in set(layers):
            if letter not in config["letters"]:
                raise CheckpointError(f"layer letter {letter!r} has no entry in the config's letters")
        self.blocks = nn.ModuleList(Block(d, config["letters"][letter]) for letter in layers)
        if "mtp" in config:
            self.mtp = MTP(d, config["mtp"])

    def hidden(self, ids, bos_id=None):
        """Final normalised hidden states (batch, seq, d_model) and the documents."""
        if ids.dim() != 2:
            raise ValueError(f"token ids must be (batch, seq), got shape {list(ids.shape)}")
        vocab = self.config["vocab"]
        if ids.numel() and (ids.min().item() < 0 or ids.max().item() >= vocab):
            bad = ids[(ids < 0) | (ids >= vocab)][0].item()
            raise ValueError(f"token id {bad} is outside the vocabulary [0, {vocab})")
        docs = Documents(ids, bos_id)
        x = self.embedding(ids)
        for block in self.blocks:
            x = block(x, docs)
        return rmsnorm(x, self.config["norm_eps"]), docs

    def head(self, h):
        """softcap(h E^T)."""
        return softcap(h @ self.embedding.weight.t(), self.config["logit_softcap"])

    def forward(self, ids, bos_id=None):
        """ids (batch, seq) int64 -> logits (batch, seq, vocab)."""
        return self.head(self.hidden(ids, bos_id)[0])

    def mtp_logits(self, ids, next_ids, bos_id=None):
        """The MTP module's logits for token t+2 at every position t; next_ids[t] is token t+1."""
        if not hasattr(self, "mtp"):
            raise CheckpointError("this checkpoint has no MTP module")
        h, docs = self.hidden(ids, bos_id)
        e = rmsnorm(self.embedding(next_ids), self.config["norm_eps"])
        u = self.mtp.block(self.mtp.proj(torch.cat([h, e], dim=-1)), docs)
        return self.head(rmsnorm(u, self.config["norm_eps"]))


def load(path, dtype=torch.float32):
    """A MegacppLM of `dtype` with the weights of checkpoint `path` (directory or model.safetensors)."""
    tensors, config = read_checkpoint(path)
    model = MegacppLM(config).to(dtype)
    # Layer state that is not a parameter (megacpp's for_each_state): a sigmoid router's balancing
    # bias, "blocks.<i>.ffn.routing.bias" (F64), one per layer.
    for name in [n for n in tensors if n.endswith(".routing.bias")]:
        owner = name[: -len(".routing.bias")]
        try:
            moe = model.get_submodule(owner)
        except AttributeError:
            raise CheckpointError(f"{path}: tensor {name!r} belongs to no MoE layer of the config") from None
        bias = tensors.pop(name)
        if not hasattr(moe, "routing_bias") or tuple(bias.shape) != tuple(moe.routing_bias.shape):
            raise CheckpointError(f"{path}: tensor {name!r} does not fit {owner!r} (shape {list(bias.shape)})")
        moe.routing_bias = bias.to(torch.float64)
    expected = dict(model.state_dict())
    missing = sorted(set(expected) - set(tensors))
    extra = sorted(set(tensors) - set(expected))
    if missing or extra:
        raise CheckpointError(f"{path}: the checkpoint's tensors do not match its config: missing {missing[:5]}, extra {extra[:5]}")
    for name, value in tensors.items():
        if tuple(value.shape) != tuple(expected[name].shape):
            raise CheckpointError(f"{path}: tensor {name!r} has shape {list(value.shape)}, the config gives {list(expected[name].shape)}")
    model.load_state_dict({name: value.to(dtype) for name, value in tensors.items()}, strict=True)
    model.eval()
    return model


# ---- command line -----------------------------------------------------------------------------


def relative_error(ours, reference):
    """max |ours - reference| / max |reference| over all entries."""
    return ((ours.double() - reference.double()).abs().max() / reference.double().abs().max()).item()


def read_f32(path, shape):
    with open(path, "rb") as f:
        return torch.frombuffer(bytearray(f.read()), dtype=torch.float32).reshape(shape)


def check(directory, tolerance):
    """Compares every case under `directory` (torch_reference's output) with megacpp's logits: the
    module run in float32 and in float64 must each be within `tolerance` (relative_error)."""
    cases = sorted(d for d in os.listdir(directory) if os.path.exists(os.path.join(directory, d, "reference.json")))
    if not cases:
        print(f"check: no case (a folder with reference.json) under {directory}")
        return 1
    failed = []
    print(f"{'model':<18} {'fp32 rel err':>13} {'fp64 rel err':>13}  (max |torch - megacpp| / max |megacpp|, tolerance {tolerance:g} on both)")
    for case in cases:
        folder = os.path.join(directory, case)
        with open(os.path.join(folder, "reference.json"), encoding="utf-8") as f:
            ref = json.load(f)
        shape = (ref["batch"], ref["seq"], ref["vocab"])
        ids = torch.tensor(ref["tokens"], dtype=torch.long).reshape(ref["batch"], ref["seq"])
        next_ids = torch.tensor(ref["next_tokens"], dtype=torch.long).reshape(ref["batch"], ref["seq"])
        outputs = [("logits", read_f32(os.path.join(folder, "logits.f32"), shape))]
        if ref["mtp"]:
            outputs.append(("mtp", read_f32(os.path.join(folder, "mtp_logits.f32"), shape)))
        for what, reference in outputs:
            errors = []
            for dtype in (torch.float32, torch.float64):
                model = load(folder, dtype)
                with torch.no_grad():
                    ours = model(ids, ref["bos_id"]) if what == "logits" else model.mtp_logits(ids, next_ids, ref["bos_id"])
                errors.append(relative_error(ours, reference))
            name = case if what == "logits" else case + " (MTP)"
            ok = max(errors) <= tolerance
            print(f"{name:<18} {errors[0]:13.3e} {errors[1]:13.3e}  {'ok' if ok else 'ABOVE TOLERANCE'}")
            if not ok:
                failed.append(name)
    if failed:
        print(f"check: {len(failed)} model(s) above {tolerance:g}: {', '.join(failed)}")
        return 1
    print(f"check: all {len(cases)} model(s) within {tolerance:g}")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description="Load a megacpp checkpoint into PyTorch (docs/pytorch.md).")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("logits", help="print the next-token top 5 after a token sequence")
    run.add_argument("checkpoint", help="checkpoint directory (model.safetensors + config.json) or model.safetensors")
    run.add_argument("--tokens", type=int, nargs="+", required=True, help="token ids of one row")
    run.add_argument("--bos", type=int, default=None, help="BOS id: a BOS token starts a new document")
    run.add_argument("--fp64", action="store_true", help="run in float64 instead of float32")
    chk = sub.add_parser("check", help="compare with megacpp's logits (tests/torch/torch_reference output)")
    chk.add_argument("directory")
    chk.add_argument("--tolerance", type=float, default=1e-5)
    args = parser.parse_args(argv)
    try:
        if args.command == "check":
            return check(args.directory, args.tolerance)
        model = load(args.checkpoint, torch.float64 if args.fp64 else torch.float32)
        with torch.no_grad():
            logits = model(torch.tensor([args.tokens], dtype=torch.long), args.bos)[0, -1]
        top = torch.topk(logits, min(5, logits.numel()))
        for value, index in zip(top.values.tolist(), top.indices.tolist()):
            print(f"{index}\t{value:.6f}")
        return 0
    except (CheckpointError, OSError, ValueError, KeyError) as e:
        print(f"megacpp_torch: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
