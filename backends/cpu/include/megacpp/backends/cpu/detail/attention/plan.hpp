// CPU fused attention, part 1 of 4: the work plan (contract: megacpp/core/kernels/attention.hpp).
//
// The CPU kernel is the FlashAttention-2 recurrence (Dao 2023) over varlen per-document tiles
// (megacpp/core/kernels/attention_tiling.hpp), split by concern: plan.hpp (this file: sizes,
// scratch, work items, scheduling), tiles.hpp (the operations on one tile), forward.hpp,
// backward.hpp. The naive reference it is tested and benchmarked against is dense_attention
// (megacpp/nn/attention/dense_reference.hpp), which materialises the (seq, seq) scores.
//
// CPU specifics:
// - The `group` query heads of one kv head are processed together: a query tile is tile_q tokens x
//   group heads = up to q_rows rows against one key tile, so the tile GEMMs are larger and
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
// - Tiles come in with the call (AttentionParams::tiles, 0: the defaults below) and what was
//   computed goes out as the returned AttentionStats: the kernel keeps no process-wide state.
#pragma once
#include "megacpp/backends/cpu/detail/guard.hpp"

#include "megacpp/backends/cpu/detail/openmp.hpp"

#include <algorithm>
#include <functional>
#include <utility>
#include <vector>

#include "megacpp/backends/cpu/detail/eigen.hpp"
#include "megacpp/core/kernels/attention.hpp"
#include "megacpp/core/tensor.hpp"

namespace megacpp::cpu::flash {

/// Default rows of a query tile: tile_q = max(1, q_rows / group) tokens, times the group's heads.
/// Smaller tiles waste less on the diagonal (a tile_q-wide band is half masked); 128 measured best
/// with tile_k 256 at head_dim 64 on the 2-core AVX-512 dev box (bench/attention).
inline constexpr index_t kDefaultQueryRows = 128;
/// Default keys per key tile: the packing of the key tile's operand is repeated per query tile,
/// so longer is better until the score tile (q_rows x tile_k) leaves L2.
inline constexpr index_t kDefaultKeyTile = 256;

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
  AttentionStats stats;  ///< this thread's counters

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

// The query tile [qs, qe) of a document: tokens, rows (token, group head), document offsets.
struct QueryTile {
  index_t qs = 0, qe = 0, rows = 0;
};
template <class T>
QueryTile query_tile(const Context<T>& c, const DocumentWork& d, index_t qt) {
  const index_t qs = qt * c.tile_q, qe = std::min(qs + c.tile_q, d.len);
  return {qs, qe, (qe - qs) * c.group};
}

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
void run_items(const Context<T>& c, std::vector<Item> items, AttentionStats& stats, Run&& run) {
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.cost > b.cost; });
  long long total = 0;
  for (const Item& it : items) total += it.cost;
  const bool serial = total * c.dim < kSerialMacs || omp_in_parallel();
  const int threads = serial ? 1 : omp_get_max_threads();
  const index_t per_thread = Scratch<T>::elements(c);
  Tensor<T, Cpu> scratch(Shape{threads * per_thread});  // counted by Cpu::memory_stats()
  std::vector<AttentionStats> counters(static_cast<std::size_t>(threads));
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
  for (const AttentionStats& s : counters) {
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
Context<T> make_context(const kernels::AttentionParams& p) {
  Context<T> c;
  c.batch = p.batch;
  c.seq = p.seq;
  c.heads = p.heads;
  c.kv_heads = p.kv_heads;
  c.group = p.group();
  c.dim = p.head_dim;
  c.dim_pad = round_up(p.head_dim, kLine<T>);
  const index_t q_rows = p.tiles.q_rows > 0 ? p.tiles.q_rows : kDefaultQueryRows;
  c.tile_q = std::max<index_t>(1, q_rows / c.group);
  c.tile_k = p.tiles.tile_k > 0 ? p.tiles.tile_k : kDefaultKeyTile;
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

}  // namespace megacpp::cpu::flash
