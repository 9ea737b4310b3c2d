// CPU backend: strided batched GEMM. Each product runs the packed register-tiled kernel of
// gemm_kernel.hpp; gemm() splits C across threads into independent blocks. eigen_gemm() is the
// reference it is tested and benchmarked against (Eigen's blocked product).
#pragma once
#include "megacpp/backends/cpu/detail/guard.hpp"

#include "megacpp/backends/cpu/detail/eigen.hpp"
#include "megacpp/backends/cpu/detail/gemm_kernel.hpp"
#include "megacpp/backends/cpu/detail/parallel.hpp"
#include "megacpp/core/backend.hpp"

namespace megacpp::cpu {

template <class T>
using RowMajorMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using ConstMatrixMap = Eigen::Map<const RowMajorMatrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <class T>
using MatrixMap = Eigen::Map<RowMajorMatrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

// Reference: C = alpha * op(A) op(B) + beta * C for one matrix of the batch through Eigen's
// product (threaded by Eigen itself outside a parallel region). Tests and bench/gemm compare the
// packed kernel with it.
template <class T>
void eigen_gemm(const GemmArgs& g, T alpha, const T* A, const T* B, T beta, T* C) {
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

// Multiply-adds per thread below which a product uses fewer threads: the fork/join and the
// extra packing of the shared operand cost more than the split saves (Eigen uses the same
// figure: kMinTaskSize in Eigen/src/Core/products/Parallelizer.h).
inline constexpr index_t kGemmMinMacsPerThread = 50'000;
// A batch of products smaller than this runs one product per thread instead (no split, no
// repacking, one fork/join for the whole batch).
inline constexpr index_t kGemmBatchSplitThreshold = index_t{1} << 24;

// Threads for one product of `macs` multiply-adds: 1 below 2 * kGemmMinMacsPerThread.
inline int gemm_threads(index_t macs) {
  if (omp_in_parallel()) return 1;
  return static_cast<int>(std::clamp<index_t>(macs / kGemmMinMacsPerThread, 1, omp_get_max_threads()));
}

// One product on `threads` threads: C split into one contiguous block of rows (or, when C is
// wider than tall, of columns) per thread, each block a single-threaded product
// `kernel(part, a, b, c)` on the block's operands.
//
// Why independent blocks rather than threads sharing packed panels (BLIS, Eigen): shared panels
// make the threads wait on each other at every depth block, so one late thread (a preempted
// vCPU, a busy hyperthread sibling) stalls all of them; a block costs one extra packing of the
// shared operand per thread (k n elements beside m n k / threads multiply-adds). Blocks start at
// whole tiles (mr rows, nr columns) so no thread computes a padded tile it does not need.
//
// Every element of C is computed by one thread with the same arithmetic as on one thread
// (gemm_kernel.hpp, gemm_bf16_kernel.hpp): the result is bitwise independent of the thread count.
template <class TA, class TB, class TC, class Kernel>
void gemm_split(const GemmArgs& g, [[maybe_unused]] int threads, index_t mr, index_t nr, const TA* A, const TB* B, TC* C, Kernel kernel) {
  const bool by_rows = g.m >= g.n;
  const index_t extent = by_rows ? g.m : g.n;
  // `threads` is read only by the pragma: unused when compiled without OpenMP.
#pragma omp parallel num_threads(threads)
  {
    const auto [begin, end] = thread_chunk(extent, omp_get_thread_num(), omp_get_num_threads(), by_rows ? mr : nr);
    if (begin < end) {
      GemmArgs part = g;
      if (by_rows) {
        part.m = end - begin;
        const TA* a_rows = g.trans_a ? A + begin : A + begin * g.lda;  // rows [begin, end) of op(A)
        kernel(part, a_rows, B, C + begin * g.ldc);
      } else {
        part.n = end - begin;
        const TB* b_cols = g.trans_b ? B + begin * g.ldb : B + begin;  // columns [begin, end) of op(B)
        kernel(part, A, b_cols, C + begin);
      }
    }
  }
}

// The batch and thread policy of every CPU GEMM: a batch of small products runs one product per
// thread; one product, or a batch of large ones, splits each product across the threads
// (gemm_split). `kernel(g, a, b, c)` is one product on the calling thread; mr x nr its tile.
template <class TA, class TB, class TC, class Kernel>
void gemm_batched(const GemmArgs& g, index_t mr, index_t nr, const TA* A, const TB* B, TC* C, Kernel kernel) {
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  const index_t macs = g.m * g.n * std::max<index_t>(g.k, 1);  // per product
  if (g.batch > 1 && macs < kGemmBatchSplitThreshold) {
    parallel_for(g.batch, macs, [&](index_t i) { kernel(g, A + i * g.stride_a, B + i * g.stride_b, C + i * g.stride_c); });
    return;
  }
  const int threads = gemm_threads(macs);
  for (index_t i = 0; i < g.batch; ++i) {
    const TA* a = A + i * g.stride_a;
    const TB* b = B + i * g.stride_b;
    TC* c = C + i * g.stride_c;
    if (threads > 1) gemm_split(g, threads, mr, nr, a, b, c, kernel);
    else kernel(g, a, b, c);
  }
}

template <class T>
void gemm(const GemmArgs& g, T alpha, const T* A, const T* B, T beta, T* C) {
  using Tile = packed_gemm::Tiling<T>;
  gemm_batched(g, Tile::MR, Tile::NR, A, B, C, [&](const GemmArgs& part, const T* a, const T* b, T* c) {
    packed_gemm::gemm<T>(part, alpha, a, b, beta, c);
  });
}

}  // namespace megacpp::cpu
