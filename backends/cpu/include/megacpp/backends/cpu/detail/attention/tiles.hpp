// CPU fused attention, part 2 of 4: the operations on one tile (see plan.hpp).
#pragma once
#include "megacpp/backends/cpu/detail/guard.hpp"

#include <algorithm>
#include <utility>

#include "megacpp/backends/cpu/detail/attention/plan.hpp"
#include "megacpp/backends/cpu/detail/gemm_kernel.hpp"

namespace megacpp::cpu::flash {

// Keys [lo, hi) of a key tile starting at document position ks (n keys) visible from the query at
// document position i: the causal and window bounds clipped to the tile. Empty when lo == hi.
inline std::pair<index_t, index_t> visible_columns(index_t i, index_t ks, index_t n, index_t window) {
  const index_t hi = std::min(n, i - ks + 1);
  const index_t lo = window > 0 ? std::clamp<index_t>(i - window + 1 - ks, 0, n) : 0;
  return {lo, std::max(lo, hi)};
}

// Packs the query tile's rows in (token, group head) order: q times `scale`, and for the backward
// dO, LSE and D = rowsum(dO * O).
template <class T>
void pack_query_tile(const Context<T>& c, const DocumentWork& d, const QueryTile& qt, bool backward, Scratch<T>& s) {
  for (index_t i = qt.qs; i < qt.qe; ++i) {
    for (index_t hg = 0; hg < c.group; ++hg) {
      const index_t r = (i - qt.qs) * c.group + hg, h = d.kvh * c.group + hg;
      const index_t src = c.query_offset(d.b, d.start + i, h);
      T* q_row = s.q + r * c.dim_pad;
      for (index_t e = 0; e < c.dim; ++e) q_row[e] = c.scale * c.q[src + e];
      if (!backward) continue;
      T* do_row = s.dout + r * c.dim_pad;
      T dot = 0;
      for (index_t e = 0; e < c.dim; ++e) {
        do_row[e] = c.grad_o[src + e];
        dot += c.grad_o[src + e] * c.o[src + e];
      }
      s.drow[r] = dot;
      s.lse[r] = c.lse[src / c.dim];
    }
  }
}

// C = op(A) op(B) + beta C for tiles held in Eigen maps (row-major, rows outerStride() apart),
// on the calling thread through the backend's packed GEMM (gemm_kernel.hpp): on these small
// products (up to 128 x 256 x 64) it packs one operand where Eigen's product packs both, and
// its per-row arithmetic does not depend on the tile's neighbours.
template <class T, class MA, class MB, class MC>
void tile_gemm(bool trans_a, const MA& A, bool trans_b, const MB& B, T beta, MC& C) {
  const index_t k = trans_a ? A.rows() : A.cols();
  const GemmArgs g{.trans_a = trans_a, .trans_b = trans_b, .m = C.rows(), .n = C.cols(), .k = k,
                   .lda = A.outerStride(), .ldb = B.outerStride(), .ldc = C.outerStride()};
  packed_gemm::gemm<T>(g, T(1), A.data(), B.data(), beta, C.data());
}

// S = Q K^T, then the softcap (keeping tanh in `t_buffer` for the backward when given).
template <class T>
void tile_scores(const Context<T>& c, const ConstTile<T>& Q, const InPlaceRows<T>& K, Tile<T>& S, T* t_buffer) {
  tile_gemm<T>(false, Q, true, K, T(0), S);
  if (c.cap > T(0)) {
    const T inv_cap = T(1) / c.cap;
    if (t_buffer) {
      Tile<T> Th(t_buffer, S.rows(), S.cols(), Eigen::OuterStride<>(c.ld_s));
      Th.array() = (S.array() * inv_cap).tanh();
      S.array() = Th.array() * c.cap;
    } else {
      S.array() = (S.array() * inv_cap).tanh() * c.cap;
    }
  }
}

// Keys [ks, ke) (document positions) of k or v for kv head d.kvh, read in place.
template <class T>
InPlaceRows<T> key_rows(const Context<T>& c, const T* base, const DocumentWork& d, index_t ks, index_t ke) {
  return InPlaceRows<T>(base + c.key_offset(d.b, d.start + ks, d.kvh), ke - ks, c.dim,
                        Eigen::OuterStride<>(c.kv_heads * c.dim));
}

}  // namespace megacpp::cpu::flash
