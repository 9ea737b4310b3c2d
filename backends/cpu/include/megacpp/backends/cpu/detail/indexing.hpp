// CPU backend: index-driven kernels (embedding gather/scatter, RoPE, cross-entropy, the LM head's
// fused softcap + cross-entropy rows).
// Indices are validated by the calling op (megacpp::Error at the API boundary); the kernels
// assume them in range.
#pragma once
#include "megacpp/backends/cpu/detail/guard.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "megacpp/backends/cpu/detail/packet_math.hpp"
#include "megacpp/backends/cpu/detail/parallel.hpp"
#include "megacpp/backends/cpu/detail/rows.hpp"
#include "megacpp/core/config.hpp"

namespace megacpp::cpu {

// out[r, :] = table[idx[r], :]
template <class T>
void gather_rows(index_t n, index_t dim, const T* table, const std::int32_t* idx, T* out) {
  parallel_for(n, dim, [&](index_t r) {
    std::memcpy(out + r * dim, table + static_cast<index_t>(idx[r]) * dim,
                static_cast<std::size_t>(dim) * sizeof(T));
  });
}

// gtable[idx[r], :] += gout[r, :]. Threads own column blocks and walk the indices in order,
// so repeated indices accumulate deterministically without atomics.
template <class T>
void scatter_add_rows(index_t n, index_t dim, const T* gout, const std::int32_t* idx, T* gtable) {
  constexpr index_t kBlock = 64;
  const index_t blocks = (dim + kBlock - 1) / kBlock;
  parallel_for(blocks, n * kBlock, [&](index_t b) {
    const index_t c0 = b * kBlock;
    const index_t width = std::min(kBlock, dim - c0);
    for (index_t r = 0; r < n; ++r) {
      T* dst = gtable + static_cast<index_t>(idx[r]) * dim + c0;
      const T* src = gout + r * dim + c0;
      for (index_t c = 0; c < width; ++c) dst[c] += src[c];
    }
  });
}

// Rotary embedding, rotate-half layout (GPT-NeoX / Llama convention; Su et al., RoFormer 2021).
// x: (tokens, heads, dim); positions: (tokens); inv_freq: (dim / 2), angle_i = pos * inv_freq_i.
//   y[i]        = x[i] cos - x[i + dim/2] sin
//   y[i + dim/2] = x[i + dim/2] cos + x[i] sin
// sign = -1 rotates by -angle (the inverse, used by the backward). y = beta * y + rotated x.
// Angles are formed in double: pos * inv_freq reaches 6e4 rad at 64K context.
//
// cos and sin are computed once per distinct position when the positions are fewer than the
// tokens (packed documents restart at 0: a (4, 1024) batch of 128-token documents has 128), else
// once per token; either way from the same double expression, so the bits are the same.
template <class T>
void rope(index_t tokens, index_t heads, index_t dim, const std::int32_t* positions, const T* inv_freq,
          int sign, const T* x, T beta, T* y) {
  const index_t half = dim / 2;
  if (tokens == 0 || half == 0) return;
  auto angles = [&](std::int32_t pos, T* cos_t, T* sin_t) {
    for (index_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(pos) * static_cast<double>(inv_freq[i]);
      cos_t[i] = static_cast<T>(std::cos(angle));
      sin_t[i] = static_cast<T>(sign * std::sin(angle));
    }
  };
  auto rotate = [&](index_t t, const T* cos_t, const T* sin_t) {
    for (index_t h = 0; h < heads; ++h) {
      const T* xr = x + (t * heads + h) * dim;
      T* yr = y + (t * heads + h) * dim;
      for (index_t i = 0; i < half; ++i) {
        const T x1 = xr[i], x2 = xr[i + half];
        const T y1 = x1 * cos_t[i] - x2 * sin_t[i];
        const T y2 = x2 * cos_t[i] + x1 * sin_t[i];
        yr[i] = beta == T(0) ? y1 : beta * yr[i] + y1;
        yr[i + half] = beta == T(0) ? y2 : beta * yr[i + half] + y2;
      }
    }
  };
  const auto [lowest, highest] = std::minmax_element(positions, positions + tokens);
  const index_t distinct = static_cast<index_t>(*highest) + 1;
  if (*lowest >= 0 && 2 * distinct <= tokens) {  // a table of positions 0..highest
    std::vector<T> table(static_cast<std::size_t>(distinct * dim));  // per position: cos (half), sin (half)
    parallel_for(distinct, half * 40, [&](index_t p) {
      angles(static_cast<std::int32_t>(p), table.data() + p * dim, table.data() + p * dim + half);
    });
    parallel_for(tokens, heads * dim * 2, [&](index_t t) {
      const T* row = table.data() + static_cast<index_t>(positions[t]) * dim;
      rotate(t, row, row + half);
    });
    return;
  }
  parallel_for(tokens, heads * dim * 2 + half * 40, [&](index_t t) {
    std::vector<T> cos_t(static_cast<std::size_t>(half)), sin_t(static_cast<std::size_t>(half));
    angles(positions[t], cos_t.data(), sin_t.data());
    rotate(t, cos_t.data(), sin_t.data());
  });
}

// One row's cross-entropy: lse = logsumexp(z) (shifted by the row's max), and the returned loss
// w (lse - z[target]), exactly 0 where the weight (loss mask) is 0.
template <class T>
T row_cross_entropy(index_t vocab, const T* z, index_t target, T w, T& lse) {
  const T m = packet_max(vocab, z);
  lse = m + std::log(exp_sum(vocab, z, m));
  return w == T(0) ? T(0) : w * (lse - z[target]);
}

// Per-row cross-entropy: lse[r] = logsumexp(logits[r, :]);
// losses[r] = mask[r] * (lse[r] - logits[r, targets[r]]). `mask` may be null (all ones).
template <class T>
void cross_entropy(index_t rows, index_t vocab, const T* logits, const std::int32_t* targets,
                   const T* mask, T* losses, T* lse) {
  parallel_for(rows, vocab * 8, [&](index_t r) {
    losses[r] = row_cross_entropy(vocab, logits + r * vocab, targets[r], mask ? mask[r] : T(1), lse[r]);
  });
}

// glogits[r, v] += scale * mask[r] * (softmax(logits[r])_v - [v == targets[r]])
template <class T>
void cross_entropy_backward(index_t rows, index_t vocab, const T* logits, const T* lse,
                            const std::int32_t* targets, const T* mask, T scale, T* glogits) {
  parallel_for(rows, vocab * 8, [&](index_t r) {
    const T w = scale * (mask ? mask[r] : T(1));
    if (w == T(0)) return;
    const T* z = logits + r * vocab;
    T* g = glogits + r * vocab;
    namespace ei = Eigen::internal;
    const Packet<T> shift = ei::pset1<Packet<T>>(lse[r]), weight = ei::pset1<Packet<T>>(w);
    packet_map<T>(vocab, z, g, g, [&](Packet<T> zv, Packet<T> gv) { return ei::pmadd(weight, ei::pexp(ei::psub(zv, shift)), gv); });
    g[targets[r]] -= w;
  });
}

// The LM head's loss rows in one kernel (linear_cross_entropy.hpp). Per row r of raw logits z:
//   zc = cap tanh(z / cap)   (cap 0: zc = z), written over z
//   lse[r] = logsumexp(zc),  losses[r] = mask_r (lse[r] - zc[t_r])
// and, when grad is not null (it may alias logits),
//   grad[r] = scale mask_r (softmax(zc) - onehot(t_r)) (1 - (zc / cap)^2)   (cap 0: no last factor)
// with the arithmetic of softcap_rows, cross_entropy, cross_entropy_backward and SoftcapGrad run
// one after the other. Why fused: a row (V floats: 32 KiB at V = 8192) stays in L1 for its three
// passes (softcap and max, sum of exponentials, gradient), where the separate kernels made six
// passes over the whole (chunk, V) block through memory, ~4% of the dense train step.
template <class T>
void softcap_cross_entropy(index_t rows, index_t vocab, T cap, T* logits, const std::int32_t* targets, const T* mask,
                           T scale, T* losses, T* lse, T* grad) {
  namespace ei = Eigen::internal;
  using P = Packet<T>;
  constexpr index_t L = kPacketLanes<T>;
  parallel_for(rows, vocab * 16, [&](index_t r) {
    T* z = logits + r * vocab;
    if (cap > T(0)) softcap_rows<T>(vocab, z, cap, z);
    const index_t target = targets[r];
    const T w = mask ? mask[r] : T(1);
    losses[r] = row_cross_entropy(vocab, z, target, w, lse[r]);
    if (!grad) return;
    T* g = grad + r * vocab;
    const T weight = scale * w;
    if (weight == T(0)) {
      std::fill(g, g + vocab, T(0));
      return;
    }
    const P shift = ei::pset1<P>(lse[r]), wv = ei::pset1<P>(weight), one = ei::pset1<P>(T(1)),
            cv = ei::pset1<P>(cap);
    const index_t target_packet = target / L * L;
    auto gradient = [&](index_t i, P zv, T* out) {  // one packet of the row from index i
      P gv = ei::pmul(wv, ei::pexp(ei::psub(zv, shift)));
      if (i == target_packet) {  // the target's lane: softmax - 1, before the softcap factor
        alignas(64) T lanes[L];
        ei::pstore(lanes, gv);
        lanes[target - i] -= weight;
        gv = ei::pload<P>(lanes);
      }
      if (cap > T(0)) {
        const P q = ei::pdiv(zv, cv);
        gv = ei::pmul(gv, ei::psub(one, ei::pmul(q, q)));
      }
      ei::pstoreu(out, gv);
    };
    index_t i = 0;
    for (; i + L <= vocab; i += L) gradient(i, ei::ploadu<P>(z + i), g + i);
    if (i < vocab) {  // the tail, padded into one packet
      alignas(64) T tail[L] = {};
      std::copy(z + i, z + vocab, tail);
      gradient(i, ei::pload<P>(tail), tail);
      std::copy(tail, tail + (vocab - i), g + i);
    }
  });
}

}  // namespace megacpp::cpu
