// CPU backend: index-driven kernels (embedding gather/scatter, RoPE, cross-entropy).
// Indices are validated by the calling op (megacpp::Error at the API boundary); the kernels
// assume them in range.
#pragma once
#include "megacpp/backends/cpu/detail/guard.hpp"

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
template <class T>
void rope(index_t tokens, index_t heads, index_t dim, const std::int32_t* positions, const T* inv_freq,
          int sign, const T* x, T beta, T* y) {
  const index_t half = dim / 2;
  parallel_for(tokens, heads * dim * 2 + half * 40, [&](index_t t) {
    std::vector<T> cos_t(static_cast<std::size_t>(half)), sin_t(static_cast<std::size_t>(half));
    for (index_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(positions[t]) * static_cast<double>(inv_freq[i]);
      cos_t[i] = static_cast<T>(std::cos(angle));
      sin_t[i] = static_cast<T>(sign * std::sin(angle));
    }
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
  });
}

// Per-row cross-entropy: lse[r] = logsumexp(logits[r, :]);
// losses[r] = mask[r] * (lse[r] - logits[r, targets[r]]). `mask` may be null (all ones).
template <class T>
void cross_entropy(index_t rows, index_t vocab, const T* logits, const std::int32_t* targets,
                   const T* mask, T* losses, T* lse) {
  parallel_for(rows, vocab * 8, [&](index_t r) {
    const T* z = logits + r * vocab;
    const T m = row_max(z, vocab);
    lse[r] = m + std::log(exp_sum(vocab, z, m));
    const T w = mask ? mask[r] : T(1);
    losses[r] = w == T(0) ? T(0) : w * (lse[r] - z[targets[r]]);
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

}  // namespace megacpp::cpu
