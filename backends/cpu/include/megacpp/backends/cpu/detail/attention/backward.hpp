// CPU fused attention, part 4 of 4: the backward (FlashAttention-2, Algorithm 2):
// Backward (Algorithm 2): D = rowsum(dO * O); per visible tile pair, recompute
//   P = exp(S - LSE);  dV_j += P^T dO_i;  dP = dO_i V_j^T;  dS = P * (dP - D)
//   dS *= 1 - tanh^2(S_raw / cap)      (softcap derivative: d(cap tanh(x/cap))/dx)
//   dK_j += dS^T (scale Q_i);  dQ_i += scale dS K_j
#pragma once
#include "megacpp/backends/cpu/detail/guard.hpp"

#include <algorithm>
#include <vector>

#include "megacpp/backends/cpu/detail/attention/tiles.hpp"

namespace megacpp::cpu::flash {

// One (query tile, key tile) pair of the backward, the query tile packed in `s` beforehand.
// Adds into dK, dV rows (dk_rows, dv_rows: the accumulator rows of the tile's first computed key,
// row stride Dp; null: not wanted) and into the dQ accumulator s.acc (want_q).
template <class T>
void backward_pair(const Context<T>& c, const DocumentWork& d, const QueryTile& qt, index_t kt, T* dk_base,
                   T* dv_base, index_t base_key, bool want_q, Scratch<T>& s) {
  const auto [ks, ke] = attention::computed_keys(qt.qs, qt.qe, kt * c.tile_k, std::min((kt + 1) * c.tile_k, d.len), c.window);
  const index_t rows = qt.rows, n = ke - ks, D = c.dim, Dp = c.dim_pad, g = c.group;
  const Eigen::OuterStride<> dp_stride(Dp), s_stride(c.ld_s);
  const ConstTile<T> Q(s.q, rows, D, dp_stride);
  const ConstTile<T> dO(s.dout, rows, D, dp_stride);
  const InPlaceRows<T> K = key_rows(c, c.k, d, ks, ke);
  Tile<T> P(s.s, rows, n, s_stride);
  Tile<T> dS(s.dp, rows, n, s_stride);
  tile_scores<T>(c, Q, K, P, c.cap > T(0) ? s.t : nullptr);
  // P = exp(S - LSE) on the visible keys, exactly 0 elsewhere.
  for (index_t i = qt.qs; i < qt.qe; ++i) {
    const auto [lo, hi] = visible_columns(i, ks, n, c.window);
    for (index_t hg = 0; hg < g; ++hg) {
      const index_t r = (i - qt.qs) * g + hg;
      T* row = s.s + r * c.ld_s;
      if (lo < hi) {
        RowSegment<T> vis(row + lo, hi - lo);
        vis = (vis - s.lse[r]).exp();
      }
      std::fill(row, row + lo, T(0));
      std::fill(row + hi, row + n, T(0));
    }
  }
  const bool want_kv = dk_base != nullptr;
  if (want_kv) {
    Tile<T> dV(dv_base + (ks - base_key) * Dp, n, D, dp_stride);
    tile_gemm<T>(true, P, false, dO, T(1), dV);
  }
  tile_gemm<T>(false, dO, true, key_rows(c, c.v, d, ks, ke), T(0), dS);  // dP
  const ColumnVector<T> drow(s.drow, rows);
  if (c.cap > T(0)) {  // dS = P * (dP - D) * (1 - tanh^2), one pass
    const Tile<T> Th(s.t, rows, n, s_stride);
    dS.array() = P.array() * (dS.array().colwise() - drow) * (T(1) - Th.array().square());
  } else {
    dS.array() = P.array() * (dS.array().colwise() - drow);
  }
  if (want_kv) {
    Tile<T> dK(dk_base + (ks - base_key) * Dp, n, D, dp_stride);
    tile_gemm<T>(true, dS, false, Q, T(1), dK);  // Q carries `scale`
  }
  if (want_q) {
    Tile<T> dQ(s.acc, rows, D, dp_stride);
    tile_gemm<T>(false, dS, false, K, T(1), dQ);  // times `scale` when flushed
  }
  ++s.stats.tiles;
  s.stats.scores += rows * n;
}

// grad_q += scale * dQ for the query tile's rows.
template <class T>
void flush_query_gradient(const Context<T>& c, const DocumentWork& d, const QueryTile& qt, const Scratch<T>& s) {
  for (index_t r = 0; r < qt.rows; ++r) {
    T* dst = c.grad_q + c.query_offset(d.b, d.start + qt.qs + r / c.group, d.kvh * c.group + r % c.group);
    const T* src = s.acc + r * c.dim_pad;
    for (index_t e = 0; e < c.dim; ++e) dst[e] += c.scale * src[e];
  }
}

// grad_k += dK, grad_v += dV for document keys [k0, k1), accumulator rows starting at k0.
template <class T>
void flush_key_gradients(const Context<T>& c, const DocumentWork& d, index_t k0, index_t k1, const T* dk, const T* dv) {
  for (index_t j = k0; j < k1; ++j) {
    const index_t dst = c.key_offset(d.b, d.start + j, d.kvh), src = (j - k0) * c.dim_pad;
    if (c.grad_k) for (index_t e = 0; e < c.dim; ++e) c.grad_k[dst + e] += dk[src + e];
    if (c.grad_v) for (index_t e = 0; e < c.dim; ++e) c.grad_v[dst + e] += dv[src + e];
  }
}

// The backward items. Query tiles in order, key tiles in order inside each: every dQ row sums its
// key tiles in order and every dK, dV row its query tiles in order, in all three kinds.
template <class T>
void backward_item(const Context<T>& c, const Item& it, Scratch<T>& s) {
  const DocumentWork& d = it.doc;
  const bool want_q = c.grad_q != nullptr, want_kv = c.grad_k || c.grad_v;
  auto run_query_tile = [&](index_t tile, T* dk, T* dv, index_t base_key, bool with_q) {
    const QueryTile qt = query_tile(c, d, tile);
    pack_query_tile(c, d, qt, true, s);
    if (with_q) std::fill(s.acc, s.acc + qt.rows * c.dim_pad, T(0));
    const attention::TileRange kr = attention::key_tiles_for_queries(qt.qs, qt.qe, c.tile_k, c.window);
    for (index_t kt = kr.first; kt < kr.last; ++kt) backward_pair(c, d, qt, kt, dk, dv, base_key, with_q, s);
    if (with_q) flush_query_gradient(c, d, qt, s);
  };
  auto run_query_tile_for_key = [&](index_t tile, index_t kt, T* dk, T* dv, index_t base_key) {
    const QueryTile qt = query_tile(c, d, tile);
    pack_query_tile(c, d, qt, true, s);
    backward_pair(c, d, qt, kt, dk, dv, base_key, false, s);
  };
  switch (it.kind) {
    case Item::Kind::backward_document: {  // owns dQ, dK, dV of the whole document
      T* dk = want_kv ? c.dk + c.accumulator_row(d.b, d.kvh, d.start) * c.dim_pad : nullptr;
      T* dv = want_kv ? c.dv + c.accumulator_row(d.b, d.kvh, d.start) * c.dim_pad : nullptr;
      if (want_kv) {
        std::fill(dk, dk + d.len * c.dim_pad, T(0));
        std::fill(dv, dv + d.len * c.dim_pad, T(0));
      }
      for (index_t tile = 0; tile < c.query_tiles(d.len); ++tile) run_query_tile(tile, dk, dv, 0, want_q);
      if (want_kv) flush_key_gradients(c, d, 0, d.len, dk, dv);
      break;
    }
    case Item::Kind::backward_key_tile: {  // owns dK, dV of one key tile
      const index_t ks = it.tile * c.tile_k, ke = std::min(ks + c.tile_k, d.len);
      std::fill(s.dk, s.dk + c.tile_k * c.dim_pad, T(0));
      std::fill(s.dv, s.dv + c.tile_k * c.dim_pad, T(0));
      const attention::TileRange qr = attention::query_tiles_for_keys(ks, ke, d.len, c.tile_q, c.window);
      for (index_t tile = qr.first; tile < qr.last; ++tile) run_query_tile_for_key(tile, it.tile, s.dk, s.dv, ks);
      flush_key_gradients(c, d, ks, ke, s.dk, s.dv);
      break;
    }
    case Item::Kind::backward_query_tile:  // owns dQ of one query tile
      run_query_tile(it.tile, nullptr, nullptr, 0, true);
      break;
    case Item::Kind::forward_query_tile:
      break;
  }
}

/// Backward: adds dL/dq, dL/dk, dL/dv (each may be null) given dL/do; returns the tiles and
/// score elements computed and which schedule ran.
template <class T>
AttentionStats backward(const kernels::AttentionParams& p, const DocumentLayout<Cpu>& docs,
                        const kernels::AttentionBackwardArgs<T>& args) {
  AttentionStats stats;
  if (!args.grad_q && !args.grad_k && !args.grad_v) return stats;
  Context<T> c = make_context<T>(p);
  c.q = args.q;
  c.k = args.k;
  c.v = args.v;
  c.o = args.o;
  c.lse = args.lse;
  c.grad_o = args.grad_o;
  c.grad_q = args.grad_q;
  c.grad_k = args.grad_k;
  c.grad_v = args.grad_v;
  const bool grad_q = args.grad_q, grad_kv = args.grad_k || args.grad_v;

  // Schedule: one pass (5 GEMMs per tile pair) unless its items leave threads idle for longer
  // than the two-pass split's extra work (7 GEMMs per pair, evenly spread) would cost.
  const std::vector<DocumentWork> work = document_work(c, docs);
  std::vector<Item> document_items;
  std::vector<long long> costs;
  long long total = 0;
  for (const DocumentWork& d : work) {
    long long cost = 0;
    for (index_t qt = 0; qt < c.query_tiles(d.len); ++qt) cost += query_tile_cost(c, d, qt);
    document_items.push_back({Item::Kind::backward_document, d, -1, cost});
    costs.push_back(cost);
    total += cost;
  }
  bool two_pass = p.tiles.backward == AttentionBackwardSchedule::two_pass;
  if (p.tiles.backward == AttentionBackwardSchedule::automatic)
    two_pass = 5 * lpt_makespan(costs, omp_get_max_threads()) * omp_get_max_threads() > 7 * total;

  stats.two_pass = two_pass;
  stats.q_rows = c.rows_max;
  stats.tile_k = c.tile_k;
  if (!two_pass) {
    Tensor<T, Cpu> dk_acc, dv_acc;  // (batch, kv_heads, seq, Dp), rows zeroed by their document's item
    if (grad_kv) {
      dk_acc = Tensor<T, Cpu>(Shape{c.batch * c.kv_heads * c.seq * c.dim_pad});
      dv_acc = Tensor<T, Cpu>(Shape{c.batch * c.kv_heads * c.seq * c.dim_pad});
      c.dk = dk_acc.data();
      c.dv = dv_acc.data();
    }
    run_items(c, std::move(document_items), stats, [&](const Item& it, Scratch<T>& s) { backward_item(c, it, s); });
    return stats;
  }
  // Two passes, independent of each other, so they share one parallel region.
  std::vector<Item> items;
  for (const DocumentWork& d : work) {
    if (grad_kv) {
      for (index_t kt = 0; kt < c.key_tiles(d.len); ++kt) {
        const index_t ks = kt * c.tile_k, ke = std::min(ks + c.tile_k, d.len);
        const attention::TileRange qr = attention::query_tiles_for_keys(ks, ke, d.len, c.tile_q, c.window);
        long long cost = 0;
        for (index_t qt = qr.first; qt < qr.last; ++qt) cost += pair_cost(c, d, qt, kt);
        items.push_back({Item::Kind::backward_key_tile, d, kt, cost});
      }
    }
    if (grad_q)
      for (index_t qt = 0; qt < c.query_tiles(d.len); ++qt)
        items.push_back({Item::Kind::backward_query_tile, d, qt, query_tile_cost(c, d, qt)});
  }
  run_items(c, std::move(items), stats, [&](const Item& it, Scratch<T>& s) { backward_item(c, it, s); });
  return stats;
}

}  // namespace megacpp::cpu::flash
