// CPU SSM scan, part 1 of 3: what the forward and the backward share (contract:
// megacpp/core/kernels/ssm_scan.hpp, whose chunk plan both use). forward.hpp and backward.hpp
// hold the two passes; the forward's small products run on detail/small_gemm.hpp.
//
// One kernel serves Mamba-3 (trapezoidal, SISO or MIMO rank R) and Mamba-2 (SSD: shift = 0).
// Per (batch row b, head h), with U_t = sum_r v_{t,r} k_{t,r}^T (the rank-R input, (P, N)):
//
//   H_t = alpha_t (H_{t-1} + shift_t U_{t-1}) + gamma_t U_t,    alpha_t = exp(log_alpha_t)
//   y_{t,r} = H_t q_{t,r} + D_h v_{t,r}
//   H = 0 and U_{t-1} = 0 at the first token of every document   (docs/systems/masking.md)
//
// This is Mamba-3's trapezoidal update H_t = alpha H_{t-1} + beta U_{t-1} + gamma U_t with
// beta = (1 - lambda) dt alpha, i.e. shift = (1 - lambda) dt, gamma = lambda dt (arXiv 2603.15569;
// `mamba3_siso_step_ref` in state-spaces/mamba tests/ops/triton/test_mamba3_siso.py); Mamba-2's
// SSD is shift = 0, gamma = dt (`ssd_minimal_discrete` in mamba_ssm/modules/ssd_minimal.py).
//
// Chunked form (the "shifted gamma" trick of `mamba3_siso_fwd_ref`): with sigma_s = shift_{s+1}
// when s + 1 is in s's document (else 0) and scale_s = gamma_s + sigma_s, the contribution of U_s
// to H_t (t > s) is exp(Lam_t - Lam_s) scale_s, and to H_s itself gamma_s. Documents are cut into
// chunks of `chunk_size` tokens starting at each document's first token. Inside a chunk, with
// Lam_i the cumulative log_alpha (the first token of a document contributes nothing: its alpha
// multiplies a zero state), W_ij = exp(Lam_i - Lam_j) scale_j (j < i), W_ii = gamma_i, and the
// state S entering the chunk (S = H_{e'} + sigma_{e'} U_{e'} of the previous chunk's last token e'):
//
//   y_i   = sum_{j <= i} W_ij (q_i . k_j) v_j + exp(Lam_i) S q_i + D v_i      (intra + inter + skip)
//   S_out = exp(Lam_e) S + sum_j exp(Lam_e - Lam_j) scale_j k_j^T v_j           (e = last token)
//
// Rows of a chunk are (token, rank) pairs, so MIMO is the same algebra on len * R rows. Each
// (b, h) is owned by one thread (threads own blocks of heads of a row), which walks the row's
// chunks in order, carrying S per head: O(T) time, and the only saved activations are the states
// entering each chunk, (N, P) per chunk and head. The forward takes each chunk in pieces of at
// most kForwardPiece tokens (the same equations, S passed between pieces), which costs less
// arithmetic than whole chunks; the backward walks the chunks in reverse carrying dS,
// recomputing the intra-chunk matrices. A chunk's arithmetic depends only on its own tokens and
// the state carried from its own document's earlier chunks, computed the same way at any address
// (products whose results do not depend on where their operands live, elementwise steps in
// buffers of the same shapes and 64-byte alignment), so a document's results are bitwise the same
// wherever it sits in a packed row, and at any thread count.
//
// Layouts (row-major): q, k (batch, seq, groups, R, N), head h reads group h / (heads / groups);
// v, y (batch, seq, heads, R, P); log_alpha, gamma, shift (batch, seq, heads); D (heads);
// chunk states (batch, heads, max_chunks, N, P). The naive reference is the literal recurrence in
// megacpp/nn/mamba/sequential_scan.hpp; tests compare the two to 1e-10 in double.
#pragma once
#include "megacpp/backends/cpu/detail/guard.hpp"

#include "megacpp/backends/cpu/detail/openmp.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "megacpp/backends/cpu/detail/eigen.hpp"
#include "megacpp/core/kernels/ssm_scan.hpp"

namespace megacpp::cpu::ssm {

using kernels::ScanChunk;
using kernels::ScanParams;

template <class T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;
template <class T>
using ConstRowsMap = Eigen::Map<const RowMatrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

// |Lam_i - Lam_j| below which exp(Lam_i - Lam_j) is formed as exp(Lam_i - Lam_0) * exp(Lam_0 - Lam_j)
// (2 L exps per chunk instead of L^2 / 2) without overflow: e^40 ~ 2e17 in float, e^300 in double.
template <class T>
constexpr T factorised_decay_limit() { return sizeof(T) == 4 ? T(40) : T(300); }

// Runs body(b, h0, h1, chunks) over (row, block of heads) items with a static schedule, one item
// per OpenMP iteration. A thread walks its heads chunk by chunk, so the rows it reads for a
// chunk (tokens x its heads) are contiguous runs rather than one row per 4 KiB page. Which thread
// owns a head, and which heads share a block, changes nothing in that head's arithmetic: results
// do not depend on the thread count. Always inside a parallel region, so the Eigen products in
// the body never fork.
template <class Body>
void for_each_head_block(const ScanParams& sh, const std::int32_t* doc_ids, Body&& body) {
  const index_t threads = std::max(1, omp_get_max_threads());
  const index_t per_thread = (sh.batch * sh.heads + threads - 1) / threads;
  const index_t block = std::clamp<index_t>(per_thread, 1, sh.heads);
  const index_t blocks_per_row = (sh.heads + block - 1) / block;
  const index_t items = sh.batch * blocks_per_row;
#pragma omp parallel
  {
    std::vector<ScanChunk> chunks;
    index_t planned_row = -1;
#pragma omp for schedule(static)
    for (index_t item = 0; item < items; ++item) {
      const index_t b = item / blocks_per_row, h0 = (item % blocks_per_row) * block;
      if (b != planned_row) {
        kernels::plan_row_chunks(doc_ids + b * sh.seq, sh.seq, sh.chunk_size, chunks);
        planned_row = b;
      }
      body(b, h0, std::min(sh.heads, h0 + block), chunks);
    }
  }
}

}  // namespace megacpp::cpu::ssm
