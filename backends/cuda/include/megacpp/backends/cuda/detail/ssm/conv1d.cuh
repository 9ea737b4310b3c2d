// CUDA backend: Mamba-2's document-aware causal depthwise conv1d (contract, equation and tap rule:
// megacpp/core/kernels/causal_conv1d.hpp; CPU reference: cpu/detail/ssm/conv1d.hpp).
//
//   forward   y[b, t, c]   = bias[c] + sum_{j valid} w[c, j] x[b, t - (K - 1) + j, c]     j = 0 .. K - 1
//   backward  dx[b, s, c] += sum_{j valid at t = s + K - 1 - j} w[c, j] dy[b, t, c]      j = K - 1 .. 0
//             dw[c, j]    += sum_{(b, t): tap j valid} dy[b, t, c] x[b, t - (K - 1) + j, c]
//             dbias[c]    += sum_{(b, t)} dy[b, t, c]
//
// "j valid" is kernels::tap_reads_document: the source token exists and is in t's document (the
// forward starts at first_tap_in_document, dx stops at last_output_reading: one walk an element).
// y and dx: one thread per output element, grid-stride, each element's sum in the CPU kernel's
// order (bias first then j up; dx starting from its old value, j down), so no atomics and the same
// rounding sequence as the CPU (up to the FMA contraction nvcc applies). dw and dbias, sums over
// every token, are token_runs.cuh's two-pass sums: each run of tokens in row order on its own
// thread, the runs added in order (the CPU adds the tokens one by one: rounding differs only).
// The per-element computations are MEGACPP_HD functions; the CUDA emulation
// (tests/cuda_emulation/test_conv1d.cpp) runs these kernels against CausalConv1d<Cpu>. The
// launches: conv1d_launch.cuh.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cstdint>

#include "megacpp/backends/cuda/detail/check.cuh"
#include "megacpp/backends/cuda/detail/token_runs.cuh"
#include "megacpp/core/config.hpp"
#include "megacpp/core/kernels/causal_conv1d.hpp"

namespace megacpp::cuda {

// y[i], i = (b * seq + t) * channels + c: bias first, then the valid taps in j order.
template <class T>
MEGACPP_HD T conv1d_output(const kernels::Conv1dParams& p, const std::int32_t* doc_ids, const kernels::Conv1dArgs<T>& a,
                           index_t i) {
  const index_t c = i % p.channels, bt = i / p.channels, b = bt / p.seq, t = bt % p.seq;
  const std::int32_t* row_ids = doc_ids + b * p.seq;
  T acc = a.bias ? a.bias[c] : T(0);
  for (index_t j = kernels::first_tap_in_document(row_ids, t, p.width); j < p.width; ++j)
    acc += a.weight[c * p.width + j] * a.x[(bt - (p.width - 1) + j) * p.channels + c];
  return acc;
}

// dx[i] after the backward, from its value before (`dx_old`), i = (b * seq + s) * channels + c:
// every output t whose tap j reads token s, j from K - 1 down (t from s up), as the CPU adds them.
template <class T>
MEGACPP_HD T conv1d_input_grad(const kernels::Conv1dParams& p, const std::int32_t* doc_ids, const T* w, const T* dy,
                               T dx_old, index_t i) {
  const index_t c = i % p.channels, bs = i / p.channels, b = bs / p.seq, s = bs % p.seq;
  const std::int32_t* row_ids = doc_ids + b * p.seq;
  T acc = dx_old;
  const index_t last = kernels::last_output_reading(row_ids, s, p.width, p.seq);
  for (index_t j = p.width - 1; j >= 0; --j) {
    const index_t t = s + (p.width - 1) - j;  // the output whose tap j reads token s
    if (t > last) break;
    acc += w[c * p.width + j] * dy[(b * p.seq + t) * p.channels + c];
  }
  return acc;
}

// dw's term of token bt (b * seq + t) in column i = j * channels + c (c fastest: neighbouring
// threads read neighbouring channels): dy[b, t, c] x[b, t - (K - 1) + j, c] where tap j is valid,
// else 0.
template <class T>
struct Conv1dWeightGradTerm {
  kernels::Conv1dParams p;
  const std::int32_t* doc_ids;
  const T* x;
  const T* dy;
  MEGACPP_HD T operator()(index_t bt, index_t i) const {
    const index_t j = i / p.channels, c = i % p.channels, b = bt / p.seq, t = bt % p.seq;
    if (!kernels::tap_reads_document(doc_ids + b * p.seq, t, j, p.width)) return T(0);
    return dy[bt * p.channels + c] * x[(bt - (p.width - 1) + j) * p.channels + c];
  }
};

// dw[c, j] of column i = j * channels + c.
template <class T>
struct Conv1dWeightAt {
  T* dw;
  index_t channels, width;
  MEGACPP_HD T& operator()(index_t i) const { return dw[(i % channels) * width + i / channels]; }
};

// dbias's term of token bt in column c: dy[b, t, c].
template <class T>
struct Conv1dBiasGradTerm {
  index_t channels;
  const T* dy;
  MEGACPP_HD T operator()(index_t bt, index_t c) const { return dy[bt * channels + c]; }
};

template <class T>
__global__ void conv1d_forward_kernel(kernels::Conv1dParams p, const std::int32_t* doc_ids, kernels::Conv1dArgs<T> a) {
  const index_t n = p.batch * p.seq * p.channels;
  for (index_t i = global_thread(); i < n; i += grid_stride()) a.y[i] = conv1d_output(p, doc_ids, a, i);
}

template <class T>
__global__ void conv1d_input_grad_kernel(kernels::Conv1dParams p, const std::int32_t* doc_ids, const T* w, const T* dy,
                                         T* dx) {
  const index_t n = p.batch * p.seq * p.channels;
  for (index_t i = global_thread(); i < n; i += grid_stride()) dx[i] = conv1d_input_grad(p, doc_ids, w, dy, dx[i], i);
}

}  // namespace megacpp::cuda
