// CUDA backend: Mamba-2's document-aware causal depthwise conv1d (contract, equation and tap rule:
// megacpp/core/kernels/causal_conv1d.hpp; CPU reference: cpu/detail/ssm/conv1d.hpp).
//
//   forward   y[b, t, c]   = bias[c] + sum_{j valid} w[c, j] x[b, t - (K - 1) + j, c]     j = 0 .. K - 1
//   backward  dx[b, s, c] += sum_{j valid at t = s + K - 1 - j} w[c, j] dy[b, t, c]      j = K - 1 .. 0
//             dw[c, j]    += sum_{(b, t): tap j valid} dy[b, t, c] x[b, t - (K - 1) + j, c]
//             dbias[c]    += sum_{(b, t)} dy[b, t, c]
//
// "j valid" is kernels::tap_reads_document: the source token exists and is in t's document.
// One thread per output element, grid-stride; each element's sum runs in the CPU kernel's order
// (bias first then j up; dx starting from its old value, j down; dw and dbias over (b, t) in row
// order from zero, added once), so no atomics and the same rounding sequence as the CPU
// (up to the FMA contraction nvcc applies). The per-element sums are MEGACPP_HD functions, so the
// same code runs in host loops, where it was checked against CausalConv1d<Cpu>.
//
// dw and dbias walk all batch * seq tokens on one thread per (j, c): simple and exact, but serial
// in the token count; a two-pass split over token chunks (partials in a fixed order) is the fix
// should it show in profiles.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cstdint>

#include "megacpp/backends/cuda/detail/check.cuh"
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
  for (index_t j = 0; j < p.width; ++j)
    if (kernels::tap_reads_document(row_ids, t, j, p.width))
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
  for (index_t j = p.width - 1; j >= 0; --j) {
    const index_t t = s + (p.width - 1) - j;  // the output whose tap j reads token s
    if (t >= p.seq || !kernels::tap_reads_document(row_ids, t, j, p.width)) continue;
    acc += w[c * p.width + j] * dy[(b * p.seq + t) * p.channels + c];
  }
  return acc;
}

// sum over (b, t) in row order of dy[b, t, c] x[b, t - (K - 1) + j, c] where tap j is valid:
// what dw[c, j] gains.
template <class T>
MEGACPP_HD T conv1d_weight_grad_sum(const kernels::Conv1dParams& p, const std::int32_t* doc_ids, const T* x,
                                    const T* dy, index_t j, index_t c) {
  T acc = 0;
  for (index_t bt = 0; bt < p.batch * p.seq; ++bt) {
    const index_t b = bt / p.seq, t = bt % p.seq;
    if (!kernels::tap_reads_document(doc_ids + b * p.seq, t, j, p.width)) continue;
    acc += dy[bt * p.channels + c] * x[(bt - (p.width - 1) + j) * p.channels + c];
  }
  return acc;
}

// sum over (b, t) in row order of dy[b, t, c]: what dbias[c] gains.
template <class T>
MEGACPP_HD T conv1d_bias_grad_sum(const kernels::Conv1dParams& p, const T* dy, index_t c) {
  T acc = 0;
  for (index_t bt = 0; bt < p.batch * p.seq; ++bt) acc += dy[bt * p.channels + c];
  return acc;
}

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

// Items i = slot * channels + c (c fastest: neighbouring threads read neighbouring channels):
// slot j < K owns dw[c, j], slot K owns dbias[c]. Either output may be null.
template <class T>
__global__ void conv1d_param_grad_kernel(kernels::Conv1dParams p, const std::int32_t* doc_ids, const T* x, const T* dy,
                                         T* dw, T* dbias) {
  const index_t n = (p.width + 1) * p.channels;
  for (index_t i = global_thread(); i < n; i += grid_stride()) {
    const index_t slot = i / p.channels, c = i % p.channels;
    if (slot < p.width) {
      if (dw) dw[c * p.width + slot] += conv1d_weight_grad_sum(p, doc_ids, x, dy, slot, c);
    } else if (dbias) {
      dbias[c] += conv1d_bias_grad_sum(p, dy, c);
    }
  }
}

// y from x, weight, bias (null: no bias); doc_ids (batch, seq) on the device.
template <class T>
void causal_conv1d_forward(const kernels::Conv1dParams& p, const std::int32_t* doc_ids, const kernels::Conv1dArgs<T>& a) {
  const index_t n = p.batch * p.seq * p.channels;
  if (n == 0) return;
  conv1d_forward_kernel<T><<<grid_for(n), kThreads, 0, kStream>>>(p, doc_ids, a);
  MEGACPP_CUDA_CHECK_LAUNCH(conv1d_forward_kernel);
}

// Adds into g.x, g.weight, g.bias, each skipped when null.
template <class T>
void causal_conv1d_backward(const kernels::Conv1dParams& p, const std::int32_t* doc_ids, const kernels::Conv1dArgs<T>& a,
                            const kernels::Conv1dGrads<T>& g) {
  const index_t n = p.batch * p.seq * p.channels;
  if (n == 0) return;
  if (g.x) {
    conv1d_input_grad_kernel<T><<<grid_for(n), kThreads, 0, kStream>>>(p, doc_ids, a.weight, g.dy, g.x);
    MEGACPP_CUDA_CHECK_LAUNCH(conv1d_input_grad_kernel);
  }
  if (g.weight || g.bias) {
    conv1d_param_grad_kernel<T><<<grid_for((p.width + 1) * p.channels), kThreads, 0, kStream>>>(p, doc_ids, a.x, g.dy,
                                                                                                 g.weight, g.bias);
    MEGACPP_CUDA_CHECK_LAUNCH(conv1d_param_grad_kernel);
  }
}

}  // namespace megacpp::cuda
