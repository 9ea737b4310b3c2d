// CPU backend: one decode step of attention over a KV cache (contract and formulas:
// megacpp/core/kernels/attention_decode.hpp).
//
// The new keys and values go into their slots first (one row at a time), then every (row, head)
// pair attends on one thread (parallel_for over batch * heads): scores, their maximum, the
// exponentials, their sum and the weighted sum of values in double, keys oldest first. Each
// output is computed by one thread in a fixed order from its own row's cache, so the results are
// bitwise the same on every thread count and the same as the CUDA kernel's up to double rounding
// of exp and tanh.
#pragma once
#include "megacpp/backends/cpu/detail/guard.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "megacpp/backends/cpu/detail/parallel.hpp"
#include "megacpp/core/kernels/attention_decode.hpp"

namespace megacpp::cpu::decode {

template <class T>
void attention_step(const kernels::AttentionDecodeParams& p, const kernels::AttentionDecodeArgs<T>& a) {
  const index_t H = p.heads, Hkv = p.kv_heads, D = p.head_dim, row_size = p.slots * Hkv * D;
  for (index_t b = 0; b < p.batch; ++b) {
    const index_t slot = a.rows[b].position % p.slots;
    std::copy_n(a.k_new + b * Hkv * D, Hkv * D, a.k + b * row_size + slot * Hkv * D);
    std::copy_n(a.v_new + b * Hkv * D, Hkv * D, a.v + b * row_size + slot * Hkv * D);
  }
  index_t most_visible = 1;
  for (index_t b = 0; b < p.batch; ++b) most_visible = std::max(most_visible, a.rows[b].visible);
  parallel_for(p.batch * H, 2 * most_visible * D, [&](index_t bh) {
    const index_t b = bh / H, h = bh % H, kvh = h / p.group();
    const index_t n = a.rows[b].visible, first = a.rows[b].position - n + 1;
    // the key and value of document position first + j, this row and kv head
    const auto cached = [&](const T* cache, index_t j) { return cache + b * row_size + ((first + j) % p.slots * Hkv + kvh) * D; };
    const T* q = a.q + bh * D;
    std::vector<double> s(static_cast<std::size_t>(n)), acc(static_cast<std::size_t>(D), 0.0);
    double m = -std::numeric_limits<double>::infinity();
    for (index_t j = 0; j < n; ++j) {
      const T* k = cached(a.k, j);
      double dot = 0;
      for (index_t d = 0; d < D; ++d) dot += static_cast<double>(q[d]) * static_cast<double>(k[d]);
      double sj = p.scale * dot;
      if (p.softcap > 0) sj = p.softcap * std::tanh(sj / p.softcap);
      s[static_cast<std::size_t>(j)] = sj;
      m = std::max(m, sj);
    }
    double l = 0;
    for (index_t j = 0; j < n; ++j) {
      const double pj = std::exp(s[static_cast<std::size_t>(j)] - m);
      l += pj;
      const T* v = cached(a.v, j);
      for (index_t d = 0; d < D; ++d) acc[static_cast<std::size_t>(d)] += pj * static_cast<double>(v[d]);
    }
    T* o = a.o + bh * D;
    for (index_t d = 0; d < D; ++d) o[d] = static_cast<T>(acc[static_cast<std::size_t>(d)] / l);
  });
}

}  // namespace megacpp::cpu::decode
