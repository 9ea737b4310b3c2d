/// \file
/// megacpp/autograd/ops/matmul.hpp: batched matrix product with transpose flags.
///
/// matmul(a, b, trans_a, trans_b) = op(a) op(b) over the last two dims, op(X) = X or X^T.
///   a (..., M, K) [or (..., K, M) with trans_a], b (..., K, N) [or (..., N, K) with trans_b].
/// Leading (batch) dims must match, or one side is a plain matrix used for every batch entry.
/// x (B, T, D) @ W (D, N) runs as one (B*T, D) x (D, N) GEMM. Backward (C = op(A) op(B)):
///   dA = dC op(B)^T  (stored transposed when trans_a: dA = op(B) dC^T)
///   dB = op(A)^T dC  (stored transposed when trans_b: dB = dC^T op(A))
/// Under MatmulPrecision::bf16 (autograd/precision.hpp; float only) the three products take bf16
/// copies of A, B and dC (rounded once each, the copies of A and B kept for the backward) and
/// sum in fp32 through Backend::gemm_bf16; the results and gradients stay fp32.
#pragma once

#include <type_traits>

#include "megacpp/autograd/function.hpp"
#include "megacpp/autograd/precision.hpp"

namespace megacpp {

namespace detail {

// One operand of a batched product: the matrix stride between batch entries (0 = shared).
struct MatmulGeometry {
  index_t batch = 1, m = 0, n = 0, k = 0;
  index_t stride_a = 0, stride_b = 0, stride_c = 0;
  Shape out;
};

// C_i (+)= op(X_i) op(Y_i) for i < batch. C must not be shared between batch entries unless
// stride_c == 0, in which case the entries are summed into C in batch order (deterministic).
template <class T, Backend B>
void batched_gemm(bool tx, bool ty, index_t batch, index_t m, index_t n, index_t k, const T* X,
                  index_t sx, const T* Y, index_t sy, T beta, T* C, index_t sc) {
  GemmArgs g = GemmArgs::dense(tx, ty, m, n, k);
  if (sc == 0 && batch > 1) {
    g.batch = 1;
    for (index_t i = 0; i < batch; ++i) B::template gemm<T>(g, T(1), X + i * sx, Y + i * sy, i == 0 ? beta : T(1), C);
    return;
  }
  g.batch = batch;
  g.stride_a = sx;
  g.stride_b = sy;
  g.stride_c = sc;
  B::template gemm<T>(g, T(1), X, Y, beta, C);
}

// batched_gemm with bf16 operands and fp32 sums, C and beta (Backend::gemm_bf16).
template <Backend B>
void batched_gemm_bf16(bool tx, bool ty, index_t batch, index_t m, index_t n, index_t k, const bf16* X,
                       index_t sx, const bf16* Y, index_t sy, float beta, float* C, index_t sc) {
  GemmArgs g = GemmArgs::dense(tx, ty, m, n, k);
  if (sc == 0 && batch > 1) {
    g.batch = 1;
    for (index_t i = 0; i < batch; ++i) B::gemm_bf16(g, 1.0f, X + i * sx, Y + i * sy, i == 0 ? beta : 1.0f, C);
    return;
  }
  g.batch = batch;
  g.stride_a = sx;
  g.stride_b = sy;
  g.stride_c = sc;
  B::gemm_bf16(g, 1.0f, X, Y, beta, C);
}

inline MatmulGeometry matmul_geometry(const Shape& a, const Shape& b, bool ta, bool tb) {
  check(a.rank() >= 2 && b.rank() >= 2, "matmul", "operands need at least 2 dims, got ", a, " x ", b);
  MatmulGeometry g;
  g.m = ta ? a[-1] : a[-2];
  const index_t ka = ta ? a[-2] : a[-1];
  const index_t kb = tb ? b[-1] : b[-2];
  g.n = tb ? b[-2] : b[-1];
  check(ka == kb, "matmul", "inner dims differ: ", a, (ta ? "^T" : ""), " x ", b, (tb ? "^T" : ""));
  g.k = ka;
  const Shape lead_a = a.prefix(a.rank() - 2), lead_b = b.prefix(b.rank() - 2);
  const index_t size_a = a[-1] * a[-2], size_b = b[-1] * b[-2];
  if (b.rank() == 2 && !ta) {  // fold a's batch into its rows: one big GEMM
    g.m *= lead_a.numel();
    g.out = lead_a.concat(Shape{ta ? a[-1] : a[-2], g.n});
    return g;
  }
  if (b.rank() == 2) {
    g.batch = lead_a.numel();
    g.stride_a = size_a;
    g.out = lead_a;
  } else if (a.rank() == 2) {
    g.batch = lead_b.numel();
    g.stride_b = size_b;
    g.out = lead_b;
  } else {
    check(lead_a == lead_b, "matmul", "batch dims differ: ", a, " x ", b);
    g.batch = lead_a.numel();
    g.stride_a = size_a;
    g.stride_b = size_b;
    g.out = lead_a;
  }
  g.out = g.out.concat(Shape{g.m, g.n});
  g.stride_c = g.m * g.n;
  return g;
}

// matmul under MatmulPrecision::bf16: the same products as matmul on bf16 copies of a, b and
// dc (mixed precision: fp32 sums, results and gradients).
template <Backend B>
Var<float, B> matmul_bf16(const Var<float, B>& a, const Var<float, B>& b, const MatmulGeometry& g, bool trans_a,
                          bool trans_b) {
  const Tensor<bf16, B> a16 = a.value_as_bf16(), b16 = b.value_as_bf16();
  Tensor<float, B> c(g.out);
  batched_gemm_bf16<B>(trans_a, trans_b, g.batch, g.m, g.n, g.k, a16.data(), g.stride_a, b16.data(), g.stride_b, 0.0f,
                       c.data(), g.stride_c);
  return make_result("matmul_bf16", std::move(c), [a, b, a16, b16, g, trans_a, trans_b](const Tensor<float, B>& dc) mutable {
    const Tensor<bf16, B> dc16 = dc.template to<bf16>();
    const bf16* A = a16.data();
    const bf16* Bm = b16.data();
    const bf16* dC = dc16.data();
    if (a.requires_grad()) {
      const GradSink<float> dA = a.grad_sink();
      if (!trans_a) batched_gemm_bf16<B>(false, !trans_b, g.batch, g.m, g.k, g.n, dC, g.stride_c, Bm, g.stride_b, dA.beta, dA.data, g.stride_a);
      else batched_gemm_bf16<B>(trans_b, true, g.batch, g.k, g.m, g.n, Bm, g.stride_b, dC, g.stride_c, dA.beta, dA.data, g.stride_a);
    }
    if (b.requires_grad()) {
      const GradSink<float> dB = b.grad_sink();
      if (!trans_b) batched_gemm_bf16<B>(!trans_a, false, g.batch, g.k, g.n, g.m, A, g.stride_a, dC, g.stride_c, dB.beta, dB.data, g.stride_b);
      else batched_gemm_bf16<B>(true, trans_a, g.batch, g.n, g.k, g.m, dC, g.stride_c, A, g.stride_a, dB.beta, dB.data, g.stride_b);
    }
  }, a, b);
}

}  // namespace detail

/// op(a) op(b) over the last two dims, op(X) = X or X^T per flag; batched over leading dims
/// (see the file comment). Transposes are flags, never copies.
template <class T, Backend B>
Var<T, B> matmul(const Var<T, B>& a, const Var<T, B>& b, bool trans_a = false, bool trans_b = false) {
  const detail::MatmulGeometry g = detail::matmul_geometry(a.shape(), b.shape(), trans_a, trans_b);
  if constexpr (std::is_same_v<T, float>) {
    if (matmul_precision() == MatmulPrecision::bf16) return detail::matmul_bf16<B>(a, b, g, trans_a, trans_b);
  }
  Tensor<T, B> c(g.out);
  detail::batched_gemm<T, B>(trans_a, trans_b, g.batch, g.m, g.n, g.k, a.value().data(), g.stride_a,
                             b.value().data(), g.stride_b, T(0), c.data(), g.stride_c);
  return make_result("matmul", std::move(c), [a, b, g, trans_a, trans_b](const Tensor<T, B>& dc) mutable {
    const T* A = a.value().data();
    const T* Bm = b.value().data();
    const T* dC = dc.data();
    if (a.requires_grad()) {
      const GradSink<T> dA = a.grad_sink();
      if (!trans_a) detail::batched_gemm<T, B>(false, !trans_b, g.batch, g.m, g.k, g.n, dC, g.stride_c, Bm, g.stride_b, dA.beta, dA.data, g.stride_a);
      else detail::batched_gemm<T, B>(trans_b, true, g.batch, g.k, g.m, g.n, Bm, g.stride_b, dC, g.stride_c, dA.beta, dA.data, g.stride_a);
    }
    if (b.requires_grad()) {
      const GradSink<T> dB = b.grad_sink();
      if (!trans_b) detail::batched_gemm<T, B>(!trans_a, false, g.batch, g.k, g.n, g.m, A, g.stride_a, dC, g.stride_c, dB.beta, dB.data, g.stride_b);
      else detail::batched_gemm<T, B>(true, trans_a, g.batch, g.n, g.k, g.m, dC, g.stride_c, A, g.stride_a, dB.beta, dB.data, g.stride_b);
    }
  }, a, b);
}

}  // namespace megacpp
