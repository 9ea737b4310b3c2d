// CPU fused attention, part 3 of 4: the forward (FlashAttention-2, Dao 2023, Algorithm 1), for
// each query tile Q_i and each key tile (K_j, V_j) it can see, in order:
// (K_j, V_j) it can see, in order:
//   S = Q_i K_j^T                      (q pre-multiplied by `scale`)
//   S = cap * tanh(S / cap)            (Gemma 2 soft-capping, when cap > 0)
//   mask: entries outside (causal AND window) get P = 0   (other documents: tile never computed)
//   m' = max(m, rowmax S);  alpha = exp(m - m');  P = exp(S - m')
//   l = alpha l + rowsum P;  O = diag(alpha) O + P V_j;  m = m'
// then O /= l and LSE = m + log l. Only O and LSE are kept for the backward.
#pragma once
#include "megacpp/backends/cpu/detail/guard.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "megacpp/backends/cpu/detail/attention/tiles.hpp"

namespace megacpp::cpu::flash {

// One query tile of one document (all `group` heads of kv head d.kvh): writes its rows of o, lse.
template <class T>
void forward_query_tile(const Context<T>& c, const DocumentWork& d, index_t tile, Scratch<T>& s) {
  const QueryTile qt = query_tile(c, d, tile);
  const index_t rows = qt.rows, D = c.dim, Dp = c.dim_pad, g = c.group;
  pack_query_tile(c, d, qt, false, s);
  const ConstTile<T> Q(s.q, rows, D, Eigen::OuterStride<>(Dp));
  Tile<T> O(s.acc, rows, D, Eigen::OuterStride<>(Dp));
  O.setZero();
  std::fill(s.m, s.m + rows, -std::numeric_limits<T>::infinity());
  std::fill(s.l, s.l + rows, T(0));
  const attention::TileRange kr = attention::key_tiles_for_queries(qt.qs, qt.qe, c.tile_k, c.window);
  for (index_t kt = kr.first; kt < kr.last; ++kt) {
    const auto [ks, ke] = attention::computed_keys(qt.qs, qt.qe, kt * c.tile_k, std::min((kt + 1) * c.tile_k, d.len), c.window);
    const index_t n = ke - ks;
    Tile<T> S(s.s, rows, n, Eigen::OuterStride<>(c.ld_s));
    tile_scores<T>(c, Q, key_rows(c, c.k, d, ks, ke), S, nullptr);
    // Online softmax, row by row over the visible keys only: masked entries get P = 0 exactly
    // (no exp(-inf) through a vectorised exp that clamps its argument).
    for (index_t i = qt.qs; i < qt.qe; ++i) {
      const auto [lo, hi] = visible_columns(i, ks, n, c.window);
      for (index_t hg = 0; hg < g; ++hg) {
        const index_t r = (i - qt.qs) * g + hg;
        T* row = s.s + r * c.ld_s;
        if (lo == hi) {  // this query sees nothing in this tile
          std::fill(row, row + n, T(0));
          s.alpha[r] = T(1);
          continue;
        }
        RowSegment<T> vis(row + lo, hi - lo);
        const T m_new = std::max(s.m[r], vis.maxCoeff());
        s.alpha[r] = std::exp(s.m[r] - m_new);  // exp(-inf) = 0 on the first visible tile
        vis = (vis - m_new).exp();
        s.l[r] = s.alpha[r] * s.l[r] + vis.sum();
        s.m[r] = m_new;
        std::fill(row, row + lo, T(0));
        std::fill(row + hi, row + n, T(0));
      }
    }
    O.array().colwise() *= ColumnVector<T>(s.alpha, rows);
    tile_gemm<T>(false, S, false, key_rows(c, c.v, d, ks, ke), T(1), O);
    ++s.stats.tiles;
    s.stats.scores += rows * n;
  }
  // O /= l, LSE = m + log l, written to o (batch, seq, heads, D) and lse (batch, seq, heads).
  for (index_t r = 0; r < rows; ++r) {
    const index_t dst = c.query_offset(d.b, d.start + qt.qs + r / g, d.kvh * g + r % g);
    const T inv = T(1) / s.l[r];  // l >= 1: the row's max contributes exp(0)
    const T* acc = s.acc + r * Dp;
    for (index_t e = 0; e < D; ++e) c.out[dst + e] = acc[e] * inv;
    c.lse_out[dst / D] = s.m[r] + std::log(s.l[r]);
  }
}

/// Forward: o (batch, seq, heads, D) and lse (batch, seq, heads) from q, k, v (contract shapes);
/// returns the tiles and score elements computed.
template <class T>
AttentionStats forward(const kernels::AttentionParams& p, const DocumentLayout<Cpu>& docs,
                       const kernels::AttentionForwardArgs<T>& args) {
  Context<T> c = make_context<T>(p);
  c.q = args.q;
  c.k = args.k;
  c.v = args.v;
  c.out = args.o;
  c.lse_out = args.lse;
  T* o = args.o;
  T* lse = args.lse;
  std::vector<Item> items;
  for (const DocumentWork& d : document_work(c, docs))
    for (index_t qt = 0; qt < c.query_tiles(d.len); ++qt)
      items.push_back({Item::Kind::forward_query_tile, d, qt, query_tile_cost(c, d, qt)});
  // Padding tokens (in no document): output 0, lse -inf.
  for (index_t b = 0; b < c.batch; ++b) {
    for (const auto& [t0, t1] : padding_ranges(docs, b)) {
      std::fill(o + c.query_offset(b, t0, 0), o + c.query_offset(b, t1, 0), T(0));
      std::fill(lse + (b * c.seq + t0) * c.heads, lse + (b * c.seq + t1) * c.heads, -std::numeric_limits<T>::infinity());
    }
  }
  AttentionStats stats;
  stats.q_rows = c.rows_max;
  stats.tile_k = c.tile_k;
  run_items(c, std::move(items), stats, [&](const Item& it, Scratch<T>& s) { forward_query_tile(c, it.doc, it.tile, s); });
  return stats;
}

}  // namespace megacpp::cpu::flash
