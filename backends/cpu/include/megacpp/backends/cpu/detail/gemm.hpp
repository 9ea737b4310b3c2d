// CPU backend: strided batched GEMM through Eigen's blocked kernels (AVX-512/FMA when built
// with -march=native). On up to kGemmMaxSplitThreads threads a large product is split by
// gemm_split into one independent single-threaded Eigen product per thread; on more threads
// Eigen's own parallel GEMM splits it.
#pragma once
#include "megacpp/backends/cpu/detail/guard.hpp"

// GCC 12 reports -W(maybe-)uninitialized inside its own AVX-512 intrinsic headers when Eigen
// inlines them (GCC bug 105593, fixed in GCC 13). The diagnostic is attributed to the intrinsic
// header's lines, so ignoring it while those headers are first included silences exactly it.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
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

// Multiply-adds per thread below which a product uses fewer threads: Eigen's own figure
// (kMinTaskSize in Eigen/src/Core/products/Parallelizer.h), so every product that Eigen would
// run on 2 threads is split here instead, and smaller ones run on one thread in both.
inline constexpr index_t kGemmMinMacsPerThread = 50'000;
// A batch of products smaller than this runs one product per thread instead (no split, no
// repacking, one fork/join for the whole batch).
inline constexpr index_t kGemmBatchSplitThreshold = index_t{1} << 24;
// Threads split C at multiples of this many rows or columns, so that every thread's block is
// made of whole micro-kernel tiles (Eigen 3.4's fp32 AVX-512 tile is 48 x 4).
inline constexpr index_t kGemmSplitGrain = 48;

// Up to this many threads a product is split into independent blocks (gemm_split); beyond it
// Eigen's own parallel GEMM runs. Every block packs the whole shared operand, so the redundant
// packing grows with the thread count: computed on one thread as 2 row blocks, a 1024^3 or
// 2048^3 product takes 4-6% longer than as one block, as 16 row blocks 55-65% longer. Eigen
// packs each panel once and shares it, which should win on many cores; only 2 threads could be
// measured here.
inline constexpr int kGemmMaxSplitThreads = 2;

// Threads for one product of `macs` multiply-adds: 1 below 2 * kGemmMinMacsPerThread.
inline int gemm_threads(index_t macs) {
  if (omp_in_parallel()) return 1;
  return static_cast<int>(std::clamp<index_t>(macs / kGemmMinMacsPerThread, 1, omp_get_max_threads()));
}

// One product on `threads` threads: C split into one contiguous block of rows (or, when C is
// wider than tall, of columns) per thread, each block a single-threaded Eigen product (Eigen
// does not fork inside a parallel region).
//
// Why not Eigen's own OpenMP split: its threads share packed panels of op(A) and wait on each
// other at every depth block, so one late thread (a preempted vCPU, a busy hyperthread sibling)
// stalls all of them. Independent blocks cost one extra packing of the shared operand per thread
// (k n floats, beside m n k / threads multiply-adds). On 2 threads of the 2-vCPU dev box they
// measured as fast as Eigen's split or faster at every size from 48^3 to 2048^3: 1.3-1.9x at
// 96^3-128^3, 1.1-1.2x at 1024^3-2048^3 (bench/gemm.cpp prints both). Each element of C is
// still computed by one thread in a fixed order: bitwise reproducible for a given thread count.
template <class T>
void gemm_split(const GemmArgs& g, int threads, T alpha, const T* A, const T* B, T beta, T* C) {
  const bool by_rows = g.m >= g.n;
  const index_t extent = by_rows ? g.m : g.n;
#pragma omp parallel num_threads(threads)
  {
    const auto [begin, end] = thread_chunk(extent, omp_get_thread_num(), omp_get_num_threads(), kGemmSplitGrain);
    if (begin < end) {
      GemmArgs part = g;
      if (by_rows) {
        part.m = end - begin;
        const T* a_rows = g.trans_a ? A + begin : A + begin * g.lda;  // rows [begin, end) of op(A)
        gemm_one<T>(part, alpha, a_rows, B, beta, C + begin * g.ldc);
      } else {
        part.n = end - begin;
        const T* b_cols = g.trans_b ? B + begin * g.ldb : B + begin;  // columns [begin, end) of op(B)
        gemm_one<T>(part, alpha, A, b_cols, beta, C + begin);
      }
    }
  }
}

template <class T>
void gemm(const GemmArgs& g, T alpha, const T* A, const T* B, T beta, T* C) {
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  const index_t macs = g.m * g.n * std::max<index_t>(g.k, 1);  // per product
  // A batch of small products: one product per thread.
  if (g.batch > 1 && macs < kGemmBatchSplitThreshold) {
    parallel_for(g.batch, macs, [&](index_t i) {
      gemm_one<T>(g, alpha, A + i * g.stride_a, B + i * g.stride_b, beta, C + i * g.stride_c);
    });
    return;
  }
  // One product, or a batch of large ones: each product split across the threads.
  const int threads = gemm_threads(macs);
  for (index_t i = 0; i < g.batch; ++i) {
    const T* a = A + i * g.stride_a;
    const T* b = B + i * g.stride_b;
    T* c = C + i * g.stride_c;
    if (threads > 1 && threads <= kGemmMaxSplitThreads) gemm_split<T>(g, threads, alpha, a, b, beta, c);
    else gemm_one<T>(g, alpha, a, b, beta, c);  // Eigen threads it itself above kGemmMaxSplitThreads
  }
}

}  // namespace megacpp::cpu
