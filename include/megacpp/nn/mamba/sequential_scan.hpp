// megacpp/nn/mamba/sequential_scan.hpp: the literal recurrence, token by token.
//
// The naive reference beside the chunked scan (STYLE.md habit 4) and the engine of decoding: the
// Mamba-3 update exactly as `mamba3_siso_step_ref` / `mamba3_MIMO_step_ref` (state-spaces/mamba
// tests/ops/triton/test_mamba3_siso.py, tests/ops/tilelang/test_mamba3_mimo.py) write it:
//
//   alpha = exp(log_alpha), beta = shift * alpha        (shift = (1 - lambda) dt, Mamba-3)
//   H  = alpha H
//   H += beta  sum_r k_prev_r^T v_prev_r                (the trapezoid's previous-token term)
//   H += gamma sum_r k_r^T v_r                          (gamma = lambda dt)
//   y_r = H^T q_r + D v_r
//
// State layout (d_state, head_dim) = (N, P): transposed relative to mamba_ssm's (headdim, d_state)
// so that every loop runs over contiguous head_dim entries. At the first token of a document the
// state and the previous token's (k, v) are zero (docs/recipe.md "Document masking"), so beta's term vanishes there.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "megacpp/autograd/grad_mode.hpp"
#include "megacpp/core/kernels/ssm_step.hpp"
#include "megacpp/nn/mamba/scan_inputs.hpp"

namespace megacpp {

namespace ssm_reference {

/// One token of the recurrence for one head, on host memory.
/// state (N, P), k_prev (R, N), v_prev (R, P) are updated in place (k_prev, v_prev become k, v);
/// q, k (R, N), v (R, P) are this token's; y (R, P) receives H^T q_r + D v_r. Column by column,
/// the decode step's own arithmetic (kernels::ssm_step_column), so the reference and the
/// SsmStep kernels cannot drift apart.
template <class T>
void recurrence_step(index_t R, index_t N, index_t P, T* state, T* k_prev, T* v_prev, const T* q, const T* k,
                     const T* v, T log_alpha, T gamma, T shift, T D, T* y) {
  const T alpha = std::exp(log_alpha);
  const T beta = shift * alpha;
  for (index_t p = 0; p < P; ++p)
    kernels::ssm_step_column<T>(R, N, P, p, state, k_prev, v_prev, q, k, v, alpha, beta, gamma, D, y);
  std::copy(k, k + R * N, k_prev);
}

/// The whole scan on host arrays (layouts of ScanInputs); shift and D may be null.
template <class T>
void sequential_scan_host(const ScanGeometry& g, const std::int32_t* doc_ids, const T* q, const T* k, const T* v,
                          const T* log_alpha, const T* gamma, const T* shift, const T* D, T* y) {
  const index_t R = g.rank, N = g.d_state, P = g.head_dim, items = g.batch * g.heads;
  const index_t heads_per_group = g.heads / g.groups;
  // Parallel over (row, head) when the translation unit has OpenMP (every CPU build does; an nvcc
  // translation unit that only declares the layers may not): each item is independent.
#if defined(_OPENMP)
#pragma omp parallel for schedule(static)
#endif
  for (index_t item = 0; item < items; ++item) {
    const index_t b = item / g.heads, h = item % g.heads, grp = h / heads_per_group;
    std::vector<T> state(static_cast<std::size_t>(N * P)), k_prev(static_cast<std::size_t>(R * N)),
        v_prev(static_cast<std::size_t>(R * P));
    for (index_t t = 0; t < g.seq; ++t) {
      if (kernels::starts_document(doc_ids + b * g.seq, t)) {
        std::fill(state.begin(), state.end(), T(0));
        std::fill(k_prev.begin(), k_prev.end(), T(0));
        std::fill(v_prev.begin(), v_prev.end(), T(0));
      }
      const index_t bt = b * g.seq + t, bth = bt * g.heads + h;
      recurrence_step<T>(R, N, P, state.data(), k_prev.data(), v_prev.data(), q + (bt * g.groups + grp) * R * N,
                         k + (bt * g.groups + grp) * R * N, v + bth * R * P, log_alpha[bth], gamma[bth],
                         shift ? shift[bth] : T(0), D ? D[h] : T(0), y + bth * R * P);
    }
  }
}

}  // namespace ssm_reference

namespace detail {
// Host-readable view of a tensor's values: the data itself where the backend's memory is host
// memory, else a host copy kept alive in `keep`.
template <class T, Backend B>
const T* host_data(const Tensor<T, B>& t, std::vector<std::vector<T>>& keep) {
  if constexpr (B::host_accessible) {
    return t.data();
  } else {
    keep.push_back(t.to_host());
    return keep.back().data();
  }
}
}  // namespace detail

/// The scan by the literal recurrence (forward only): the reference the chunked scan is tested
/// against, and what decoding runs. Same operands and result as chunked_scan. Throws when a
/// gradient would be needed: train with chunked_scan.
template <class T, Backend B>
Var<T, B> sequential_scan(const ScanInputs<T, B>& in, const DocumentLayout<B>& docs) {
  const ScanGeometry g = detail::check_scan_inputs("sequential_scan", in, docs);
  const bool wants_grad = in.q.requires_grad() || in.k.requires_grad() || in.v.requires_grad() ||
                          in.log_alpha.requires_grad() || in.gamma.requires_grad() ||
                          (in.shift.defined() && in.shift.requires_grad()) || (in.D.defined() && in.D.requires_grad());
  check(!(grad_enabled() && wants_grad), "sequential_scan",
        "is forward-only (the reference recurrence and the decoder): train with chunked_scan, or run it under NoGrad");
  std::vector<std::vector<T>> keep;
  keep.reserve(7);
  const T* q = detail::host_data(in.q.value(), keep);
  const T* k = detail::host_data(in.k.value(), keep);
  const T* v = detail::host_data(in.v.value(), keep);
  const T* log_alpha = detail::host_data(in.log_alpha.value(), keep);
  const T* gamma = detail::host_data(in.gamma.value(), keep);
  const T* shift = in.shift.defined() ? detail::host_data(in.shift.value(), keep) : nullptr;
  const T* D = in.D.defined() ? detail::host_data(in.D.value(), keep) : nullptr;
  const Shape out_shape{g.batch, g.seq, g.heads, g.rank, g.head_dim};
  if constexpr (B::host_accessible) {
    Tensor<T, B> y(out_shape);
    ssm_reference::sequential_scan_host<T>(g, docs.doc_ids_host.data(), q, k, v, log_alpha, gamma, shift, D, y.data());
    return Var<T, B>(std::move(y));
  } else {
    std::vector<T> y(static_cast<std::size_t>(out_shape.numel()));
    ssm_reference::sequential_scan_host<T>(g, docs.doc_ids_host.data(), q, k, v, log_alpha, gamma, shift, D, y.data());
    return Var<T, B>(Tensor<T, B>::from_host(out_shape, y));
  }
}

}  // namespace megacpp
