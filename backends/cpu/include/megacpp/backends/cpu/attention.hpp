// megacpp/backends/cpu/attention.hpp: the CPU fused attention kernel (FlashAttention-2 recurrence,
// varlen per-document tiles, GQA, softcap, sliding window), specialising megacpp::FusedAttention<Cpu>.
//
// Forward (Dao, "FlashAttention-2", 2023, Algorithm 1), for each query tile Q_i and each key tile
// (K_j, V_j) it can see, in order:
//   S = Q_i K_j^T                      (q pre-multiplied by `scale`)
//   S = cap * tanh(S / cap)            (Gemma 2 soft-capping, when cap > 0)
//   mask: entries outside (causal AND window) get P = 0   (other documents: tile never computed)
//   m' = max(m, rowmax S);  alpha = exp(m - m');  P = exp(S - m')
//   l = alpha l + rowsum P;  O = diag(alpha) O + P V_j;  m = m'
// then O /= l and LSE = m + log l. Only O and LSE are kept for the backward.
// Backward (Algorithm 2): D = rowsum(dO * O); per visible tile pair, recompute
//   P = exp(S - LSE);  dV_j += P^T dO_i;  dP = dO_i V_j^T;  dS = P * (dP - D)
//   dS *= 1 - tanh^2(S_raw / cap)      (softcap derivative: d(cap tanh(x/cap))/dx)
//   dK_j += dS^T (scale Q_i);  dQ_i += scale dS K_j
// The naive reference this kernel is tested and benchmarked against is dense_attention
// (megacpp/nn/attention/dense_reference.hpp), which materialises the (seq, seq) scores.
//
// CPU specifics:
// - The `group` query heads of one kv head are processed together: a query tile is tile_q tokens x
//   group heads = up to Tuning::q_rows rows against one key tile, so the tile GEMMs are larger and
//   K/V tiles are read once per group (GQA).
// - Bitwise "a document's result does not depend on its neighbours": tiles start at the
//   document's first token, and every buffer an Eigen expression *writes* (scores, probabilities,
//   accumulators, the packed query tile) is per-thread scratch starting 64-byte aligned with rows
//   padded to 64 bytes, so Eigen's vectorised loops peel and split identically wherever the
//   document sits. K and V are read in place (batch, seq, kv_heads, D): the tile products run on
//   the backend's packed GEMM (tile_gemm), whose arithmetic does not depend on the operands'
//   alignment or on the rows around a row. A query tile's rows
//   (token, group head) are packed (times `scale`) into scratch, as are dO, LSE and D.
// - One OpenMP parallel region per call, work items on a dynamic schedule, largest first; each
//   output element is written by exactly one item in a fixed order, so results are bitwise
//   reproducible and do not depend on which thread ran what (or on the thread count). Each item
//   zeroes and flushes its own accumulators: no global packing, zeroing or unpacking pass, so a
//   call has a single fork/join (which matters on a shared, oversubscribed machine).
//   Forward items: (row, kv head, document, query tile). Backward: one pass with items
//   (row, kv head, document) owning their dQ, dK, dV (5 GEMMs per tile pair), or, when those are
//   too few or too uneven for the threads, the FA2 split: items (row, kv head, document, key
//   tile) for dK/dV and (..., query tile) for dQ (7 GEMMs per pair, evenly spread). Every
//   gradient element receives its contributions in the same order either way (key tiles in
//   order for dQ, query tiles in order for dK, dV), so both give bitwise the same result.
// - Memory: per-thread tile scratch, plus dK/dV accumulators of (batch, kv_heads, seq, Dp) for
//   the one-pass backward; no (seq, seq) buffer exists.
#pragma once

#include "megacpp/backends/cpu.hpp"  // first: brings Eigen in behind its GCC 12 warning guard

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <utility>
#include <vector>

#include "megacpp/nn/attention/kernel.hpp"
#include "megacpp/nn/attention/tiling.hpp"

namespace megacpp::cpu::flash {

/// Tile sizes and backward schedule of the CPU kernel. Process-wide, like Eigen::setNbThreads:
/// tests and benches change them, normal code leaves the defaults.
struct Tuning {
  /// Rows of a query tile: tile_q = max(1, q_rows / group) tokens, times the group's heads.
  /// Smaller tiles waste less on the diagonal (a tile_q-wide band is half masked); 128 measured
  /// best with tile_k 256 at head_dim 64 on the 2-core AVX-512 dev box (bench/attention).
  index_t q_rows = 128;
  /// Keys per key tile: the packing of the key tile's operand is repeated per query tile, so
  /// longer is better until the score tile (q_rows x tile_k) leaves L2.
  index_t tile_k = 256;
  /// Backward work decomposition (all give bitwise the same result).
  enum class Backward {
    automatic,    ///< one pass unless its items cannot keep the threads busy
    single_pass,  ///< items (row, kv head, document) own dQ, dK and dV
    two_pass,     ///< FA2 split: dK/dV by key tile, then dQ by query tile
  } backward = Backward::automatic;  ///< which backward schedule runs
};

/// The process-wide tuning.
inline Tuning& tuning() {
  static Tuning t;
  return t;
}

/// What one kernel call computed: tile pairs and score elements (the cost measure), and which
/// backward schedule ran.
struct Stats {
  long long tiles = 0;     ///< (query tile, key tile) pairs computed
  long long scores = 0;    ///< score elements computed (rows x keys over those tiles)
  bool two_pass = false;   ///< backward only: the FA2 two-pass schedule ran
};

/// Counters of the last forward call (tests and benches read them).
inline Stats& last_forward_stats() {
  static Stats s;
  return s;
}
/// Counters of the last backward call.
inline Stats& last_backward_stats() {
  static Stats s;
  return s;
}

namespace detail {

template <class T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
// A tile in scratch: starts 64-byte aligned, rows `ld` elements apart (ld * sizeof(T) a multiple
// of 64).
template <class T>
using Tile = Eigen::Map<RowMatrix<T>, Eigen::Aligned64, Eigen::OuterStride<>>;
template <class T>
using ConstTile = Eigen::Map<const RowMatrix<T>, Eigen::Aligned64, Eigen::OuterStride<>>;
// Rows of k or v read in place: any alignment, rows kv_heads * D apart.
template <class T>
using InPlaceRows = Eigen::Map<const RowMatrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <class T>
using RowSegment = Eigen::Map<Eigen::Array<T, 1, Eigen::Dynamic>>;  // part of one row, any alignment
template <class T>
using ColumnVector = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

// Elements per 64 bytes: scratch rows are padded to a multiple of this.
template <class T>
constexpr index_t kLine = static_cast<index_t>(64 / sizeof(T));
inline index_t round_up(index_t n, index_t to) { return (n + to - 1) / to * to; }

/// One document of one row for one kv head: the unit of tiling.
struct DocumentWork {
  index_t b = 0;      ///< batch row
  index_t kvh = 0;    ///< kv head (with its `group` query heads)
  index_t start = 0;  ///< first token of the document in the row
  index_t len = 0;    ///< tokens in the document
};
/// A work item: a document and, depending on the pass, a query or key tile index.
struct Item {
  /// What the item computes.
  enum class Kind {
    forward_query_tile,   ///< o, lse of one query tile
    backward_document,    ///< one-pass backward: dQ, dK, dV of a whole document
    backward_key_tile,    ///< two-pass backward: dK, dV of one key tile
    backward_query_tile,  ///< two-pass backward: dQ of one query tile
  };
  Kind kind = Kind::forward_query_tile;  ///< what the item computes
  DocumentWork doc;                      ///< the document
  index_t tile = -1;                     ///< query or key tile index; -1: the whole document
  long long cost = 0;                    ///< score elements the item computes (for scheduling)
};

/// Sizes, operands and resolved options shared by every item of one call.
template <class T>
struct Context {
  index_t batch = 0;      ///< rows
  index_t seq = 0;        ///< tokens per row
  index_t heads = 0;      ///< query heads
  index_t kv_heads = 0;   ///< kv heads
  index_t group = 0;      ///< query heads per kv head
  index_t dim = 0;        ///< head_dim D
  index_t dim_pad = 0;    ///< Dp: D rounded up to 64 bytes (scratch row stride)
  index_t tile_q = 0;     ///< query tokens per query tile
  index_t tile_k = 0;     ///< keys per key tile
  index_t rows_max = 0;   ///< tile_q * group: rows of a full query tile
  index_t ld_s = 0;       ///< row stride of the score tiles (tile_k rounded up to 64 bytes)
  T scale = 1;            ///< score scale (folded into the packed query tile)
  T cap = 0;              ///< softcap (0: none)
  index_t window = 0;     ///< sliding window (0: none)
  const T* q = nullptr;   ///< (batch, seq, heads, D)
  const T* k = nullptr;   ///< (batch, seq, kv_heads, D)
  const T* v = nullptr;   ///< (batch, seq, kv_heads, D)
  T* out = nullptr;       ///< (batch, seq, heads, D) forward output o
  T* lse_out = nullptr;   ///< (batch, seq, heads) forward output lse
  const T* o = nullptr;   ///< (batch, seq, heads, D) saved o (backward)
  const T* lse = nullptr; ///< (batch, seq, heads) saved lse (backward)
  const T* grad_o = nullptr;  ///< (batch, seq, heads, D) dL/do (backward)
  T* grad_q = nullptr;    ///< (batch, seq, heads, D) gradient to add into (may be null)
  T* grad_k = nullptr;    ///< (batch, seq, kv_heads, D) gradient to add into (may be null)
  T* grad_v = nullptr;    ///< (batch, seq, kv_heads, D) gradient to add into (may be null)
  T* dk = nullptr;        ///< (batch, kv_heads, seq, Dp) one-pass dK accumulator
  T* dv = nullptr;        ///< (batch, kv_heads, seq, Dp) one-pass dV accumulator

  /// Offset of (b, t, h, 0) in q, o, grad_o, grad_q.
  index_t query_offset(index_t b, index_t t, index_t h) const { return ((b * seq + t) * heads + h) * dim; }
  /// Offset of (b, t, kvh, 0) in k, v, grad_k, grad_v.
  index_t key_offset(index_t b, index_t t, index_t kvh) const { return ((b * seq + t) * kv_heads + kvh) * dim; }
  /// Row of token t in the (batch, kv_heads, seq) numbering of the one-pass accumulators.
  index_t accumulator_row(index_t b, index_t kvh, index_t t) const { return (b * kv_heads + kvh) * seq + t; }
  /// Query tiles of a document of `len` tokens.
  index_t query_tiles(index_t len) const { return attention::tile_count(len, tile_q); }
  /// Key tiles of a document of `len` tokens.
  index_t key_tiles(index_t len) const { return attention::tile_count(len, tile_k); }
};

/// Per-thread scratch, carved from one aligned allocation (every piece a multiple of 64 bytes).
template <class T>
struct Scratch {
  T* s = nullptr;      ///< (rows_max, ld_s): scores, then probabilities P
  T* t = nullptr;      ///< (rows_max, ld_s): tanh(S_raw / cap), softcap only (backward)
  T* dp = nullptr;     ///< (rows_max, ld_s): dP, then dS (backward)
  T* q = nullptr;      ///< (rows_max, Dp): packed query tile, times scale
  T* dout = nullptr;   ///< (rows_max, Dp): packed dO tile (backward)
  T* acc = nullptr;    ///< (rows_max, Dp): O accumulator (forward) or dQ accumulator (backward)
  T* dk = nullptr;     ///< (tile_k, Dp): two-pass dK accumulator of one key tile
  T* dv = nullptr;     ///< (tile_k, Dp): two-pass dV accumulator of one key tile
  T* m = nullptr;      ///< (rows_max): running row max (forward)
  T* l = nullptr;      ///< (rows_max): running row sum (forward)
  T* alpha = nullptr;  ///< (rows_max): rescale factor exp(m - m') (forward)
  T* lse = nullptr;    ///< (rows_max): the query tile's log-sum-exp (backward)
  T* drow = nullptr;   ///< (rows_max): the query tile's D = rowsum(dO * O) (backward)
  Stats stats;         ///< this thread's counters

  /// Elements one thread's scratch needs.
  static index_t elements(const Context<T>& c) {
    return 3 * c.rows_max * c.ld_s + 3 * c.rows_max * c.dim_pad + 2 * c.tile_k * c.dim_pad +
           5 * round_up(c.rows_max, kLine<T>);
  }
  /// The pieces of one thread's scratch starting at `base` (64-byte aligned).
  static Scratch carve(const Context<T>& c, T* base) {
    const index_t tile = c.rows_max * c.ld_s, rows = c.rows_max * c.dim_pad, keys = c.tile_k * c.dim_pad,
                  vec = round_up(c.rows_max, kLine<T>);
    Scratch s;
    T* p = base;
    for (T** piece : {&s.s, &s.t, &s.dp}) *piece = std::exchange(p, p + tile);
    for (T** piece : {&s.q, &s.dout, &s.acc}) *piece = std::exchange(p, p + rows);
    for (T** piece : {&s.dk, &s.dv}) *piece = std::exchange(p, p + keys);
    for (T** piece : {&s.m, &s.l, &s.alpha, &s.lse, &s.drow}) *piece = std::exchange(p, p + vec);
    return s;
  }
};

// Keys [lo, hi) of a key tile starting at document position ks (n keys) visible from the query at
// document position i: the causal and window bounds clipped to the tile. Empty when lo == hi.
inline std::pair<index_t, index_t> visible_columns(index_t i, index_t ks, index_t n, index_t window) {
  const index_t hi = std::min(n, i - ks + 1);
  const index_t lo = window > 0 ? std::clamp<index_t>(i - window + 1 - ks, 0, n) : 0;
  return {lo, std::max(lo, hi)};
}

// The query tile [qs, qe) of a document: tokens, rows (token, group head), document offsets.
struct QueryTile {
  index_t qs = 0, qe = 0, rows = 0;
};
template <class T>
QueryTile query_tile(const Context<T>& c, const DocumentWork& d, index_t qt) {
  const index_t qs = qt * c.tile_q, qe = std::min(qs + c.tile_q, d.len);
  return {qs, qe, (qe - qs) * c.group};
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

// ---- forward ------------------------------------------------------------------------------------

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

// ---- backward -----------------------------------------------------------------------------------

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

// ---- scheduling ---------------------------------------------------------------------------------

// Score elements a (query tile, key tile) pair computes.
template <class T>
long long pair_cost(const Context<T>& c, const DocumentWork& d, index_t qt, index_t kt) {
  const QueryTile q = query_tile(c, d, qt);
  const attention::TileRange keys =
      attention::computed_keys(q.qs, q.qe, kt * c.tile_k, std::min((kt + 1) * c.tile_k, d.len), c.window);
  return static_cast<long long>(q.rows) * (keys.last - keys.first);
}
// Score elements of one query tile against every key tile it sees.
template <class T>
long long query_tile_cost(const Context<T>& c, const DocumentWork& d, index_t qt) {
  const QueryTile q = query_tile(c, d, qt);
  const attention::TileRange kr = attention::key_tiles_for_queries(q.qs, q.qe, c.tile_k, c.window);
  long long cost = 0;
  for (index_t kt = kr.first; kt < kr.last; ++kt) cost += pair_cost(c, d, qt, kt);
  return cost;
}

// Every (row, kv head, document) of the batch.
template <class T, class Docs>
std::vector<DocumentWork> document_work(const Context<T>& c, const Docs& docs) {
  std::vector<DocumentWork> out;
  for (index_t b = 0; b < c.batch; ++b)
    for (index_t kvh = 0; kvh < c.kv_heads; ++kvh)
      for (const DocumentSpan& span : docs.spans[static_cast<std::size_t>(b)]) out.push_back({b, kvh, span.start, span.length});
  return out;
}

// Multiply-adds below which a call runs on the calling thread (Eigen's threshold for splitting
// one product, kMinTaskSize in Eigen/src/Core/products/Parallelizer.h): below it a fork/join
// costs more than the call.
inline constexpr long long kSerialMacs = 50'000;

// Runs run(item, scratch) for every item, largest cost first, on all OpenMP threads with a dynamic
// schedule (results do not depend on the assignment), or serially for a tiny call. Every tile
// product runs single-threaded (tile_gemm) with the same blocking whatever the thread count, so
// the results are bitwise independent of it. Sums the counters into `stats`.
template <class T, class Run>
void run_items(const Context<T>& c, std::vector<Item> items, Stats& stats, Run&& run) {
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.cost > b.cost; });
  long long total = 0;
  for (const Item& it : items) total += it.cost;
  const bool serial = total * c.dim < kSerialMacs || omp_in_parallel();
  const int threads = serial ? 1 : omp_get_max_threads();
  const index_t per_thread = Scratch<T>::elements(c);
  Tensor<T, Cpu> scratch(Shape{threads * per_thread});  // counted by Cpu::memory_stats()
  std::vector<Stats> counters(static_cast<std::size_t>(threads));
  const index_t count = static_cast<index_t>(items.size());
  if (serial) {
    Scratch<T> s = Scratch<T>::carve(c, scratch.data());
    for (const Item& it : items) run(it, s);
    counters[0] = s.stats;
  } else {
#pragma omp parallel num_threads(threads)
    {
      const int t = omp_get_thread_num();
      Scratch<T> s = Scratch<T>::carve(c, scratch.data() + t * per_thread);
#pragma omp for schedule(dynamic, 1)
      for (index_t i = 0; i < count; ++i) run(items[static_cast<std::size_t>(i)], s);
      counters[static_cast<std::size_t>(t)] = s.stats;
    }
  }
  for (const Stats& s : counters) {
    stats.tiles += s.tiles;
    stats.scores += s.scores;
  }
}

// Longest-processing-time-first makespan of `costs` on `threads` machines (greedy, sorted).
inline long long lpt_makespan(std::vector<long long> costs, int threads) {
  std::sort(costs.begin(), costs.end(), std::greater<>());
  std::vector<long long> load(static_cast<std::size_t>(std::max(1, threads)), 0);
  for (long long x : costs) *std::min_element(load.begin(), load.end()) += x;
  return *std::max_element(load.begin(), load.end());
}

// Resolves sizes and tile shapes; tile_q depends only on the group size, never on the packing.
template <class T>
Context<T> make_context(const AttentionParams& p) {
  Context<T> c;
  c.batch = p.batch;
  c.seq = p.seq;
  c.heads = p.heads;
  c.kv_heads = p.kv_heads;
  c.group = p.group();
  c.dim = p.head_dim;
  c.dim_pad = round_up(p.head_dim, kLine<T>);
  const Tuning& tune = tuning();
  c.tile_q = std::max<index_t>(1, tune.q_rows / c.group);
  c.tile_k = std::max<index_t>(1, tune.tile_k);
  c.rows_max = c.tile_q * c.group;
  c.ld_s = round_up(c.tile_k, kLine<T>);
  c.scale = static_cast<T>(p.scale);
  c.cap = static_cast<T>(p.softcap);
  c.window = p.window;
  return c;
}

// Tokens of row b covered by no document span (padding), as ranges.
template <class Docs>
std::vector<std::pair<index_t, index_t>> padding_ranges(const Docs& docs, index_t b) {
  std::vector<std::pair<index_t, index_t>> gaps;
  index_t end = 0;
  for (const DocumentSpan& s : docs.spans[static_cast<std::size_t>(b)]) {
    if (s.start > end) gaps.emplace_back(end, s.start);
    end = s.start + s.length;
  }
  if (end < docs.seq) gaps.emplace_back(end, docs.seq);
  return gaps;
}

}  // namespace detail

/// Forward: o (batch, seq, heads, D) and lse (batch, seq, heads) from q, k, v (kernel.hpp shapes).
template <class T>
void forward(const AttentionParams& p, const DocumentLayout<Cpu>& docs, const T* q, const T* k, const T* v, T* o,
             T* lse) {
  using namespace detail;
  Context<T> c = make_context<T>(p);
  c.q = q;
  c.k = k;
  c.v = v;
  c.out = o;
  c.lse_out = lse;
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
  Stats& stats = last_forward_stats();
  stats = Stats{};
  run_items(c, std::move(items), stats, [&](const Item& it, Scratch<T>& s) { forward_query_tile(c, it.doc, it.tile, s); });
}

/// Backward: adds dL/dq, dL/dk, dL/dv (each may be null) given dL/do.
template <class T>
void backward(const AttentionParams& p, const DocumentLayout<Cpu>& docs, const T* q, const T* k, const T* v,
              const T* o, const T* lse, const T* grad_o, T* grad_q, T* grad_k, T* grad_v) {
  using namespace detail;
  if (!grad_q && !grad_k && !grad_v) return;
  Context<T> c = make_context<T>(p);
  c.q = q;
  c.k = k;
  c.v = v;
  c.o = o;
  c.lse = lse;
  c.grad_o = grad_o;
  c.grad_q = grad_q;
  c.grad_k = grad_k;
  c.grad_v = grad_v;

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
  bool two_pass = tuning().backward == Tuning::Backward::two_pass;
  if (tuning().backward == Tuning::Backward::automatic)
    two_pass = 5 * lpt_makespan(costs, omp_get_max_threads()) * omp_get_max_threads() > 7 * total;

  Stats& stats = last_backward_stats();
  stats = Stats{};
  stats.two_pass = two_pass;
  if (!two_pass) {
    Tensor<T, Cpu> dk_acc, dv_acc;  // (batch, kv_heads, seq, Dp), rows zeroed by their document's item
    if (grad_k || grad_v) {
      dk_acc = Tensor<T, Cpu>(Shape{c.batch * c.kv_heads * c.seq * c.dim_pad});
      dv_acc = Tensor<T, Cpu>(Shape{c.batch * c.kv_heads * c.seq * c.dim_pad});
      c.dk = dk_acc.data();
      c.dv = dv_acc.data();
    }
    run_items(c, std::move(document_items), stats, [&](const Item& it, Scratch<T>& s) { backward_item(c, it, s); });
    return;
  }
  // Two passes, independent of each other, so they share one parallel region.
  std::vector<Item> items;
  for (const DocumentWork& d : work) {
    if (grad_k || grad_v) {
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
}

}  // namespace megacpp::cpu::flash

namespace megacpp {

/// The CPU backend's fused attention (see the contract in megacpp/nn/attention/kernel.hpp).
template <>
struct FusedAttention<Cpu> {
  /// o, lse from q, k, v; tiles per document, masked tiles skipped.
  template <class T>
  static void forward(const AttentionParams& p, const DocumentLayout<Cpu>& docs, const T* q, const T* k, const T* v,
                      T* o, T* lse) {
    cpu::flash::forward<T>(p, docs, q, k, v, o, lse);
  }
  /// Adds dq, dk, dv (each may be null) from the saved o, lse and the output gradient.
  template <class T>
  static void backward(const AttentionParams& p, const DocumentLayout<Cpu>& docs, const T* q, const T* k, const T* v,
                       const T* o, const T* lse, const T* grad_o, T* grad_q, T* grad_k, T* grad_v) {
    cpu::flash::backward<T>(p, docs, q, k, v, o, lse, grad_o, grad_q, grad_k, grad_v);
  }
};

}  // namespace megacpp
