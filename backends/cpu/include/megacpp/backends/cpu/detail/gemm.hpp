// CPU backend: strided batched GEMM through Eigen's blocked kernels (AVX-512/FMA when built
// with -march=native; OpenMP-parallel inside Eigen for a single large product).
#pragma once
#include "megacpp/backends/cpu/detail/guard.hpp"

// GCC 12 reports -Wmaybe-uninitialized inside its own AVX-512 intrinsic headers when Eigen
// inlines them (GCC bug 105593, fixed in GCC 13). The diagnostic is attributed to the intrinsic
// header's lines, so ignoring it while those headers are first included silences exactly it.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#endif
#include <Eigen/Core>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include "megacpp/backends/cpu/detail/parallel.hpp"
#include "megacpp/core/backend.hpp"

namespace megacpp::cpu {

template <class T>
using RowMajorMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using ConstMatrixMap = Eigen::Map<const RowMajorMatrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <class T>
using MatrixMap = Eigen::Map<RowMajorMatrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

// C = alpha * op(A) op(B) + beta * C for one matrix of the batch.
template <class T>
void gemm_one(const GemmArgs& g, T alpha, const T* A, const T* B, T beta, T* C) {
  const ConstMatrixMap<T> a(A, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, Eigen::OuterStride<>(g.lda));
  const ConstMatrixMap<T> b(B, g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, Eigen::OuterStride<>(g.ldb));
  MatrixMap<T> c(C, g.m, g.n, Eigen::OuterStride<>(g.ldc));
  if (g.k == 0) {  // empty inner product: C = beta * C
    if (beta == T(0)) c.setZero(); else c *= beta;
    return;
  }
  auto product = [&](const auto& op_a, const auto& op_b) {
    if (beta == T(0)) {
      c.noalias() = alpha * (op_a * op_b);
    } else {
      if (beta != T(1)) c *= beta;
      c.noalias() += alpha * (op_a * op_b);
    }
  };
  if (g.trans_a && g.trans_b) product(a.transpose(), b.transpose());
  else if (g.trans_a) product(a.transpose(), b);
  else if (g.trans_b) product(a, b.transpose());
  else product(a, b);
}

template <class T>
void gemm(const GemmArgs& g, T alpha, const T* A, const T* B, T beta, T* C) {
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  auto one = [&](index_t i) {
    gemm_one<T>(g, alpha, A + i * g.stride_a, B + i * g.stride_b, beta, C + i * g.stride_c);
  };
  // Many small products: one per thread (Eigen then runs each single-threaded). One large
  // product or a short batch: Eigen splits each product across the threads itself.
  const index_t flops = g.m * g.n * std::max<index_t>(g.k, 1);
  if (g.batch > 1 && flops < (index_t{1} << 24)) {
    parallel_for(g.batch, flops, one);
  } else {
    for (index_t i = 0; i < g.batch; ++i) one(i);
  }
}

}  // namespace megacpp::cpu
