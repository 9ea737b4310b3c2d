// CPU backend: the MoE gated combine (contract: megacpp/core/kernels/gated_combine.hpp).
//
//   forward   y[t]        = sum_{j < k} gate[t, j] ys[r(t, j)]      slots in order
//   backward  dys[r(t,j)] += gate[t, j] dy[t],   dgate[t, j] += dy[t] . ys[r(t, j)]
//
// Threads own whole tokens (parallel_for over t): a token's output, its k gradient rows and its k
// gate gradients are computed by one thread in a fixed order, so the results are bitwise the same
// on every thread count and depend on the token's own rows only. The inner loops over the row
// width are contiguous and vectorised by the compiler (omp simd); the dot product sums 16 fixed
// lanes, then the lanes in order, so its rounding is the same with or without OpenMP and
// vectorisation (the compiler may not reorder those adds).
#pragma once
#include "megacpp/backends/cpu/detail/guard.hpp"

#include <cstdint>

#include "megacpp/backends/cpu/detail/parallel.hpp"
#include "megacpp/core/kernels/gated_combine.hpp"

namespace megacpp::cpu::moe {

// sum_c x[c] y[c] in 16 lanes (lane l takes c = l mod 16), then the lanes and the tail in order.
template <class T>
T lane_dot(index_t n, const T* x, const T* y) {
  constexpr index_t kLanes = 16;
  T lanes[kLanes] = {};
  index_t c = 0;
  for (; c + kLanes <= n; c += kLanes)
    for (index_t l = 0; l < kLanes; ++l) lanes[l] += x[c + l] * y[c + l];
  T dot = 0;
  for (index_t l = 0; l < kLanes; ++l) dot += lanes[l];
  for (; c < n; ++c) dot += x[c] * y[c];
  return dot;
}

template <class T>
void gated_combine_forward(const kernels::GatedCombineParams& p, const kernels::GatedCombineArgs<T>& a) {
  const index_t tokens = p.tokens, k = p.k, d = p.d;
  parallel_for(tokens, k * d, [&](index_t t) {
    T* y = a.y + t * d;
    for (index_t j = 0; j < k; ++j) {
      const T g = a.gate[t * k + j];
      const T* row = a.ys + static_cast<index_t>(a.row_of_slot[j * tokens + t]) * d;
      if (j == 0) {
#pragma omp simd
        for (index_t c = 0; c < d; ++c) y[c] = g * row[c];
      } else {
#pragma omp simd
        for (index_t c = 0; c < d; ++c) y[c] += g * row[c];
      }
    }
  });
}

template <class T>
void gated_combine_backward(const kernels::GatedCombineParams& p, const kernels::GatedCombineArgs<T>& a,
                            const kernels::GatedCombineGrads<T>& g) {
  const index_t tokens = p.tokens, k = p.k, d = p.d;
  parallel_for(tokens, 2 * k * d, [&](index_t t) {
    const T* dy = g.dy + t * d;
    for (index_t j = 0; j < k; ++j) {
      const index_t r = static_cast<index_t>(a.row_of_slot[j * tokens + t]);
      if (g.dys) {
        const T gate = a.gate[t * k + j];
        T* dys = g.dys + r * d;
#pragma omp simd
        for (index_t c = 0; c < d; ++c) dys[c] += gate * dy[c];
      }
      if (g.dgate) {
        g.dgate[t * k + j] += lane_dot(d, dy, a.ys + r * d);
      }
    }
  });
}

}  // namespace megacpp::cpu::moe
