// CPU backend: the grouped expert GEMM (contract: megacpp/core/kernels/grouped_gemm.hpp).
//
//   forward   Y_g  = X_g W_g^T      backward  dX_g += dY_g W_g,  dW_g += dY_g^T X_g
//
// Each group's product is cut into pieces along one output dimension (whole tiles: NR columns
// of Y or dX, MR rows of dW), and all pieces of all groups go to the threads together, largest
// first, each a single-threaded packed product (gemm_kernel.hpp). So eight groups of uneven size
// on two threads keep both busy, and a large group still splits. Cutting Y and dX by columns
// keeps the product's rows read in place and packs each piece's own slice of W_g only (no
// repacking); dW is cut by rows of N, each piece packing its rows of dY_g^T.
//
// Every element is computed by the packed kernel with the same arithmetic whatever piece holds
// it (a row of C depends only on its row of op(A) and on op(B); depth blocks are fixed), so the
// result is bitwise independent of the piece plan and of the thread count, and a token's output
// row depends on its own row and W_g only.
//
// With bf16 operands (fp32 sums and results, the contract's mixed precision) each piece is the
// same product through cpu::gemm_bf16 on the process's path (gemm_bf16.hpp): the VDPBF16PS
// kernel, or the fp32 kernel on the operands converted exactly to fp32. Either way a piece's
// elements are those of Cpu::gemm_bf16 on the whole group (tests/moe/test_moe.cpp).
#pragma once
#include "megacpp/backends/cpu/detail/guard.hpp"

#include <algorithm>
#include <vector>

#include "megacpp/backends/cpu/detail/gemm.hpp"
#include "megacpp/backends/cpu/detail/gemm_bf16.hpp"
#include "megacpp/core/kernels/grouped_gemm.hpp"

namespace megacpp::cpu::grouped {

// A piece of one group's product: output indices [begin, end) of the dimension being cut.
struct Piece {
  index_t group = 0;
  index_t begin = 0, end = 0;
  index_t macs = 0;
};

// Cuts each group's `extent` output indices (rows or columns, in `tile`s) into pieces so that
// there are about 4 per thread overall and none below kGemmMinMacsPerThread multiply-adds, then
// orders them largest first (the longest-processing-time rule: the big ones start early, the
// small ones fill the gaps).
inline std::vector<Piece> plan_pieces(const kernels::GroupedGemmParams& p, index_t extent, index_t tile,
                                      index_t macs_per_index_per_row, int threads) {
  index_t total = 0;
  for (index_t g = 0; g < p.groups; ++g) total += (p.offsets[g + 1] - p.offsets[g]) * extent * macs_per_index_per_row;
  const index_t target = std::max<index_t>(kGemmMinMacsPerThread, total / std::max(1, 4 * threads));
  std::vector<Piece> pieces;
  for (index_t g = 0; g < p.groups; ++g) {
    const index_t rows = p.offsets[g + 1] - p.offsets[g];
    if (rows == 0) continue;
    const index_t macs = rows * extent * macs_per_index_per_row;
    const index_t tiles = (extent + tile - 1) / tile;
    const index_t chunks = std::clamp<index_t>((macs + target - 1) / target, 1, tiles);
    for (index_t c = 0; c < chunks; ++c) {
      const auto [begin, end] = thread_chunk(extent, c, chunks, tile);
      if (begin < end) pieces.push_back({g, begin, end, rows * (end - begin) * macs_per_index_per_row});
    }
  }
  std::stable_sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) { return a.macs > b.macs; });
  return pieces;
}

// Runs body(piece) for every piece, dynamically across the threads (a piece's result does not
// depend on which thread runs it).
template <class Body>
void run_pieces(const std::vector<Piece>& pieces, Body&& body) {
  const index_t n = static_cast<index_t>(pieces.size());
  const int threads = omp_in_parallel() ? 1 : static_cast<int>(std::min<index_t>(n, omp_get_max_threads()));
  if (threads <= 1) {
    for (const Piece& piece : pieces) body(piece);
    return;
  }
  // `threads` is read only by the pragma: unused when compiled without OpenMP.
  (void)threads;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (index_t i = 0; i < n; ++i) body(pieces[static_cast<std::size_t>(i)]);
}

inline int max_threads() { return omp_in_parallel() ? 1 : omp_get_max_threads(); }

// One piece's product C = op(A) op(B) + beta C: the packed kernel in T, or with bf16 operands
// the bf16 GEMM's (fp32 sums), single-threaded inside run_pieces' parallel loop either way.
template <class T, class Operand>
void piece_product(const GemmArgs& g, const Operand* a, const Operand* b, T beta, T* c) {
  static_assert(kernels::grouped_gemm_operands<T, Operand>, "megacpp_grouped_gemm_operands_are_T_or_bf16_into_float");
  if constexpr (std::is_same_v<T, Operand>) packed_gemm::gemm<T>(g, T(1), a, b, beta, c);
  else gemm_bf16(g, 1.0f, a, b, beta, c, bf16_gemm_path());
}

// y (M, N) = x_g (rows, K) w_g^T per group; pieces are column slices of y.
template <class T, class Operand = T>
void forward(const kernels::GroupedGemmParams& p, const Operand* x, const Operand* w, T* y) {
  using Tile = packed_gemm::Tiling<T>;
  const index_t K = p.k, N = p.n;
  run_pieces(plan_pieces(p, N, Tile::NR, K, max_threads()), [&](const Piece& piece) {
    const index_t row0 = p.offsets[piece.group], rows = p.offsets[piece.group + 1] - row0;
    GemmArgs g = GemmArgs::dense(false, true, rows, piece.end - piece.begin, K);
    g.ldc = N;
    const Operand* w_slice = w + (piece.group * N + piece.begin) * K;  // rows [begin, end) of W_g
    piece_product<T, Operand>(g, x + row0 * K, w_slice, T(0), y + row0 * N + piece.begin);
  });
}

// dx (M, K) += dy_g (rows, N) w_g (N, K); pieces are column slices of dx.
template <class T, class Operand = T>
void backward_input(const kernels::GroupedGemmParams& p, const Operand* dy, const Operand* w, T* dx) {
  using Tile = packed_gemm::Tiling<T>;
  const index_t K = p.k, N = p.n;
  run_pieces(plan_pieces(p, K, Tile::NR, N, max_threads()), [&](const Piece& piece) {
    const index_t row0 = p.offsets[piece.group], rows = p.offsets[piece.group + 1] - row0;
    GemmArgs g = GemmArgs::dense(false, false, rows, piece.end - piece.begin, N);
    g.ldb = K;
    g.ldc = K;
    piece_product<T, Operand>(g, dy + row0 * N, w + piece.group * N * K + piece.begin, T(1), dx + row0 * K + piece.begin);
  });
}

// dw_g (N, K) += dy_g^T (N, rows) x_g (rows, K); pieces are row slices of dw_g. A group without
// rows adds nothing.
template <class T, class Operand = T>
void backward_weight(const kernels::GroupedGemmParams& p, const Operand* dy, const Operand* x, T* dw) {
  using Tile = packed_gemm::Tiling<T>;
  const index_t K = p.k, N = p.n;
  run_pieces(plan_pieces(p, N, Tile::MR, K, max_threads()), [&](const Piece& piece) {
    const index_t row0 = p.offsets[piece.group], rows = p.offsets[piece.group + 1] - row0;
    GemmArgs g = GemmArgs::dense(true, false, piece.end - piece.begin, K, rows);
    g.lda = N;  // dy_g stored (rows, N); op(A) = dy_g^T, its rows [begin, end) start at column begin
    piece_product<T, Operand>(g, dy + row0 * N + piece.begin, x + row0 * K, T(1),
                              dw + (piece.group * N + piece.begin) * K);
  });
}

// The naive reference: one scalar loop per output element, in double sums. Tests compare the
// kernel with it (tests/support/kernel_cases/grouped_gemm.hpp has an independent one too).
template <class T>
void forward_reference(const kernels::GroupedGemmParams& p, const T* x, const T* w, T* y) {
  for (index_t g = 0; g < p.groups; ++g)
    for (index_t r = p.offsets[g]; r < p.offsets[g + 1]; ++r)
      for (index_t j = 0; j < p.n; ++j) {
        double s = 0;
        for (index_t c = 0; c < p.k; ++c) s += double(x[r * p.k + c]) * double(w[(g * p.n + j) * p.k + c]);
        y[r * p.n + j] = static_cast<T>(s);
      }
}

}  // namespace megacpp::cpu::grouped
