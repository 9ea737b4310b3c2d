// CUDA backend: fused attention over document spans (contract: megacpp/core/kernels/attention.hpp;
// the CPU kernel, cpu/detail/attention/, is the reference). FlashAttention-2 (Dao 2023,
// arXiv 2307.08691), Algorithms 1 and 2, on the CUDA cores in the input's precision:
//
//   forward  per query tile and each key tile it sees, in order:
//              S = (scale q) k^T;  S = cap tanh(S / cap) (Gemma 2, when cap > 0);  mask
//              m' = max(m, rowmax S);  P = exp(S - m');  l = exp(m - m') l + rowsum P
//              O = exp(m - m') O + P V;  m = m'        then O /= l, LSE = m + log l
//   backward D = rowsum(dO o O);  P = exp(S - LSE);  dV += P^T dO;  dP = dO V^T
//            dS = P (dP - D) (1 - tanh^2(S_raw / cap));  dK += dS^T (scale q);  dQ += scale dS K
//
// Work is planned per document as on the CPU (attention_tiling.hpp): a block owns one query tile
// (forward, dQ) or one key tile (dK, dV) of one document and one head, and walks only the tiles
// the causal/window mask leaves visible, trimmed by computed_keys. Other documents' tiles are
// never visited, so 8 documents cost ~1/8 of one. The backward is FlashAttention-2's two-pass
// split (section 3.2): dK/dV by key tile, then dQ by query tile, so every gradient row has one
// writer and the sums run in a fixed order: no atomics, bitwise reproducible run to run.
//
// Threads: TPR consecutive lanes share one row (a query, or a key in the dK/dV pass), each
// holding DPT of its head_dim elements in registers (MAXD = TPR x DPT >= head_dim, zero padded).
// Dot products sum a lane's slice in order, then over the TPR lanes by an xor butterfly, which
// gives every lane the same bits (each step adds the same two values, a + b == b + a). The key
// (or query) tile a block reads is staged in shared memory with each lane's slice skewed by 4
// elements, so the TPR lanes of a row read different banks.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cuda/std/limits>
#include <vector>

#include "megacpp/backends/cuda/detail/check.cuh"
#include "megacpp/core/kernels/attention.hpp"

namespace megacpp::cuda::flash {

inline constexpr int kBlockThreads = 128;  // threads per block in every attention kernel
inline constexpr int kKeyTile = 32;        // keys staged per step (forward, dQ)
inline constexpr int kQueryChunk = 32;     // queries staged per step (dK/dV)

// One unit of planned work: tile `tile` of the document [start, start + len) of row b.
struct WorkTile {
  std::int32_t b, start, len, tile;
};

// Sizes and resolved options every kernel reads.
template <class T>
struct Geometry {
  index_t seq, heads, kv_heads, dim, group, window;
  T scale, cap;  // cap 0: no softcap
};

// The row layout of one (DPT, TPR) instantiation: MAXD elements per row, lanes' slices skewed.
template <int DPT, int TPR>
struct RowLayout {
  static constexpr int kMaxDim = DPT * TPR;
  static constexpr int kSlice = DPT + 4;          // a lane's slice in shared memory, skewed 4 elements
  static constexpr int kRow = TPR * kSlice;       // one staged row
  static constexpr int kRowsPerBlock = kBlockThreads / TPR;
  // Shared-memory offset of head element e within a staged row.
  __device__ static int offset(int e) { return (e / DPT) * kSlice + e % DPT; }
};

// Host side, shared by the launches (attention_launch.cuh) and the host emulation of the kernels
// (tests/cuda_emulation). Calls f.template operator()<DPT, TPR>() for the smallest layout holding
// head_dim: 8, 16 and 32 elements on one lane, then 2, 4 and 8 lanes of 32 (64, 128, 256).
template <class F>
void with_row_layout(index_t dim, F&& f) {
  if (dim <= 8) f.template operator()<8, 1>();
  else if (dim <= 16) f.template operator()<16, 1>();
  else if (dim <= 32) f.template operator()<32, 1>();
  else if (dim <= 64) f.template operator()<32, 2>();
  else if (dim <= 128) f.template operator()<32, 4>();
  else f.template operator()<32, 8>();
}

// Whether `spans` leave some of `tokens` tokens in no document (padding): host work planning,
// shared by the forwards' launch code (has_padding, attention_launch.cuh) and the host emulation.
inline bool spans_leave_padding(const std::vector<std::vector<DocumentSpan>>& spans, index_t tokens) {
  index_t covered = 0;
  for (const auto& row : spans)
    for (const DocumentSpan& span : row) covered += span.length;
  return covered < tokens;
}

// The order of a work list, which is the order its blocks start in: the GPU starts a grid's
// blocks by index as SMs free up. Causal tiles differ in work: query tile t of a document visits
// t + 1 key tiles (fewer under a window, never more for a smaller t), and key tile t of an n-tile
// document is seen by the queries of n - t query tiles. In document order the longest query tiles
// start last and the SMs run dry unevenly at the end; heaviest first (longest processing time
// first: Graham, "Bounds on multiprocessing timing anomalies", SIAM J. Appl. Math. 1969) leaves
// the shortest blocks for the end. The order moves no arithmetic: each block computes and writes
// the same rows whenever it runs.
enum class TileOrder : index_t {
  documents = 0,           // row, document, tile
  late_queries_first = 1,  // query-tile kernels (forward, dQ): decreasing tile index
  early_keys_first = 2,    // key-tile kernels (dK/dV): decreasing tiles after this one in its document
};

// The tiles of every document of every row (a layout's spans), `rows` tokens per tile, in `order`
// (ties in document order).
inline std::vector<WorkTile> document_tiles(const std::vector<std::vector<DocumentSpan>>& spans, index_t rows,
                                            TileOrder order = TileOrder::documents) {
  std::vector<WorkTile> work;
  for (std::size_t b = 0; b < spans.size(); ++b)
    for (const DocumentSpan& span : spans[b])
      for (index_t t = 0; t < attention::tile_count(span.length, rows); ++t)
        work.push_back({static_cast<std::int32_t>(b), static_cast<std::int32_t>(span.start),
                        static_cast<std::int32_t>(span.length), static_cast<std::int32_t>(t)});
  auto later_tiles = [rows](const WorkTile& w) { return attention::tile_count(w.len, rows) - w.tile; };
  if (order == TileOrder::late_queries_first)
    std::stable_sort(work.begin(), work.end(), [](const WorkTile& a, const WorkTile& b) { return a.tile > b.tile; });
  else if (order == TileOrder::early_keys_first)
    std::stable_sort(work.begin(), work.end(),
                     [&](const WorkTile& a, const WorkTile& b) { return later_tiles(a) > later_tiles(b); });
  return work;
}

template <class T>
__device__ inline T exp_of(T x) {
  if constexpr (sizeof(T) == 4) return ::expf(x);
  else return ::exp(x);
}
template <class T>
__device__ inline T log_of(T x) {
  if constexpr (sizeof(T) == 4) return ::logf(x);
  else return ::log(x);
}
template <class T>
__device__ inline T tanh_of(T x) {
  if constexpr (sizeof(T) == 4) return ::tanhf(x);
  else return ::tanh(x);
}
template <class T>
__device__ inline T minus_infinity() {
  return -::cuda::std::numeric_limits<T>::infinity();
}

// Sum of a row's dot product over its TPR lanes (xor butterfly: the same bits in every lane).
template <int TPR, class T>
__device__ inline T row_sum(T partial) {
#pragma unroll
  for (int offset = TPR / 2; offset > 0; offset /= 2) partial += __shfl_xor_sync(0xFFFFFFFFu, partial, offset);
  return partial;
}

// x[0..DPT) . staged[0..DPT), in element order.
template <int DPT, class T>
__device__ inline T slice_dot(const T (&x)[DPT], const T* staged) {
  T sum = 0;
#pragma unroll
  for (int d = 0; d < DPT; ++d) sum += x[d] * staged[d];
  return sum;
}

// acc[0..DPT) += a * staged[0..DPT).
template <int DPT, class T>
__device__ inline void slice_axpy(T (&acc)[DPT], T a, const T* staged) {
#pragma unroll
  for (int d = 0; d < DPT; ++d) acc[d] += a * staged[d];
}

// Stages rows [first, first + count) of a (batch, seq, n_heads, dim) tensor for head `head` of
// document row b (token positions relative to `start`) into shared memory, zero padded to MAXD.
template <class T, int DPT, int TPR>
__device__ inline void stage_rows(T* staged, const T* src, index_t b, index_t start, index_t first, int count,
                                  index_t seq, index_t n_heads, index_t head, index_t dim, T factor) {
  using L = RowLayout<DPT, TPR>;
  for (int idx = threadIdx.x; idx < count * L::kMaxDim; idx += kBlockThreads) {
    const int r = idx / L::kMaxDim, e = idx % L::kMaxDim;
    const index_t token = b * seq + start + first + r;
    staged[r * L::kRow + L::offset(e)] = e < dim ? factor * src[(token * n_heads + head) * dim + e] : T(0);
  }
}

// Loads this lane's slice of one head row of a (batch, seq, n_heads, dim) tensor, zero padded.
template <class T, int DPT>
__device__ inline void load_slice(T (&x)[DPT], const T* src, index_t row_offset, int e0, index_t dim, bool active, T factor) {
#pragma unroll
  for (int d = 0; d < DPT; ++d) x[d] = active && e0 + d < dim ? factor * src[row_offset + e0 + d] : T(0);
}

// Softcapped score and the tanh the backward's derivative needs (t = 0 without a cap).
template <class T>
__device__ inline T capped(T s, T cap, T& t) {
  if (cap > T(0)) {
    t = tanh_of(s * (T(1) / cap));
    return t * cap;
  }
  t = T(0);
  return s;
}

// The row a thread of a query-tile block (forward, dQ) owns: the block's document tile and head,
// the thread's query (a document position), its slice of the head, and where its row starts in
// q-shaped tensors.
template <int DPT, int TPR>
struct QueryTileRow {
  WorkTile w;
  index_t h, kvh, qs, qe, i, row;
  int part, e0;
  bool active;

  template <class T>
  __device__ QueryTileRow(const Geometry<T>& g, const WorkTile* work) : w(work[blockIdx.x]) {
    constexpr index_t rows = RowLayout<DPT, TPR>::kRowsPerBlock;
    h = blockIdx.y;
    kvh = h / g.group;
    part = static_cast<int>(threadIdx.x) % TPR;
    e0 = part * DPT;
    qs = static_cast<index_t>(w.tile) * rows;
    qe = qs + rows < w.len ? qs + rows : w.len;
    i = qs + threadIdx.x / TPR;
    active = i < qe;
    row = ((w.b * g.seq + w.start + i) * g.heads + h) * g.dim;
  }
};

// For each key tile the query tile sees, in order: stages its computed keys (k and v rows,
// computed_keys) in shared memory and calls body(first key, key count). Every thread of the block
// must call it (the barriers).
template <class T, int DPT, int TPR, class Body>
__device__ void for_each_key_tile(const Geometry<T>& g, const QueryTileRow<DPT, TPR>& r, const T* k, const T* v,
                                  T* k_staged, T* v_staged, Body&& body) {
  const attention::TileRange kr = attention::key_tiles_for_queries(r.qs, r.qe, kKeyTile, g.window);
  for (index_t kt = kr.first; kt < kr.last; ++kt) {
    const index_t tile_end = (kt + 1) * kKeyTile < r.w.len ? (kt + 1) * kKeyTile : r.w.len;
    const attention::TileRange keys = attention::computed_keys(r.qs, r.qe, kt * kKeyTile, tile_end, g.window);
    const int n = static_cast<int>(keys.last - keys.first);
    __syncthreads();  // the previous tile's readers are done
    stage_rows<T, DPT, TPR>(k_staged, k, r.w.b, r.w.start, keys.first, n, g.seq, g.kv_heads, r.kvh, g.dim, T(1));
    stage_rows<T, DPT, TPR>(v_staged, v, r.w.b, r.w.start, keys.first, n, g.seq, g.kv_heads, r.kvh, g.dim, T(1));
    __syncthreads();
    body(keys.first, n);
  }
}

// ---- forward: one block per (document query tile, query head) ---------------------------------
template <class T, int DPT, int TPR>
__global__ void __launch_bounds__(kBlockThreads)
    forward_kernel(Geometry<T> g, const WorkTile* work, const T* q, const T* k, const T* v, T* o, T* lse) {
  using L = RowLayout<DPT, TPR>;
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  T* k_staged = reinterpret_cast<T*>(shared_bytes);  // (kKeyTile, kRow)
  T* v_staged = k_staged + kKeyTile * L::kRow;        // (kKeyTile, kRow)
  const QueryTileRow<DPT, TPR> r(g, work);
  T qr[DPT], acc[DPT];
  load_slice<T, DPT>(qr, q, r.row, r.e0, g.dim, r.active, g.scale);
#pragma unroll
  for (int d = 0; d < DPT; ++d) acc[d] = T(0);
  T m = minus_infinity<T>(), l = T(0);
  for_each_key_tile(g, r, k, v, k_staged, v_staged, [&](index_t first_key, int n) {
    T s[kKeyTile];
    T tile_max = minus_infinity<T>();
#pragma unroll
    for (int j = 0; j < kKeyTile; ++j) {
      if (j < n) {  // n is the same for the whole block: every lane reaches the shuffle
        T t;
        const T score = capped(row_sum<TPR>(slice_dot<DPT>(qr, k_staged + j * L::kRow + r.part * L::kSlice)), g.cap, t);
        const bool visible = r.active && attention::visible(r.i, first_key + j, g.window);
        s[j] = visible ? score : minus_infinity<T>();
        tile_max = s[j] > tile_max ? s[j] : tile_max;
      }
    }
    if (tile_max == minus_infinity<T>()) return;  // this row sees no key of the tile
    const T m_new = m > tile_max ? m : tile_max;
    const T alpha = exp_of(m - m_new);  // exp(-inf) = 0 on the row's first visible tile
    T row_sum_p = T(0);
#pragma unroll
    for (int d = 0; d < DPT; ++d) acc[d] *= alpha;
#pragma unroll
    for (int j = 0; j < kKeyTile; ++j) {
      if (j < n) {
        const T p = s[j] == minus_infinity<T>() ? T(0) : exp_of(s[j] - m_new);
        row_sum_p += p;
        slice_axpy<DPT>(acc, p, v_staged + j * L::kRow + r.part * L::kSlice);
      }
    }
    l = alpha * l + row_sum_p;
    m = m_new;
  });
  if (!r.active) return;
  const T inv = T(1) / l;  // l >= 1: every query sees itself
#pragma unroll
  for (int d = 0; d < DPT; ++d)
    if (r.e0 + d < g.dim) o[r.row + r.e0 + d] = acc[d] * inv;
  if (r.part == 0) lse[r.row / g.dim] = m + log_of(l);
}

// ---- backward, step 0: D = rowsum(dO o O) per (token, head) -------------------------------------
// One warp per row: lane l sums elements l, l + 32, ... (consecutive lanes read consecutive
// addresses; one thread per row read rows dim apart), then the xor butterfly gives every lane the
// same bits. Launch with a whole number of warps per block (grid_for(rows * 32)).
template <class T>
__global__ void output_dot_kernel(index_t rows, index_t dim, const T* o, const T* grad_o, T* drow) {
  const index_t lane = global_thread() % 32;
  for (index_t r = global_thread() / 32; r < rows; r += grid_stride() / 32) {  // the same r in every lane of a warp
    T sum = 0;
    for (index_t e = lane; e < dim; e += 32) sum += grad_o[r * dim + e] * o[r * dim + e];
    sum = row_sum<32>(sum);
    if (lane == 0) drow[r] = sum;
  }
}

// ---- backward, pass 1: dK, dV; one block per (document key tile, kv head) ------------------------
// A row is a key j; the block walks the group's query heads in order and, for each, the queries
// that see its keys (query_tiles_for_keys, in chunks of kQueryChunk), in order.
template <class T, int DPT, int TPR>
__global__ void __launch_bounds__(kBlockThreads)
    key_value_grad_kernel(Geometry<T> g, const WorkTile* work, const T* q, const T* k, const T* v, const T* grad_o,
                          const T* lse, const T* drow, T* grad_k, T* grad_v) {
  using L = RowLayout<DPT, TPR>;
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  T* q_staged = reinterpret_cast<T*>(shared_bytes);       // (kQueryChunk, kRow): scale q
  T* do_staged = q_staged + kQueryChunk * L::kRow;        // (kQueryChunk, kRow): dO
  T* lse_staged = do_staged + kQueryChunk * L::kRow;      // (kQueryChunk)
  T* d_staged = lse_staged + kQueryChunk;                 // (kQueryChunk)
  const WorkTile w = work[blockIdx.x];
  const index_t kvh = blockIdx.y;
  const int lane_row = threadIdx.x / TPR, part = threadIdx.x % TPR, e0 = part * DPT;
  const index_t ks = static_cast<index_t>(w.tile) * L::kRowsPerBlock;
  const index_t ke = ks + L::kRowsPerBlock < w.len ? ks + L::kRowsPerBlock : w.len;
  const index_t j = ks + lane_row;  // this row's key, a document position
  const bool active = j < ke;
  const index_t kv_row = ((w.b * g.seq + w.start + j) * g.kv_heads + kvh) * g.dim;
  T kr[DPT], vr[DPT], dk[DPT], dv[DPT];
  load_slice<T, DPT>(kr, k, kv_row, e0, g.dim, active, T(1));
  load_slice<T, DPT>(vr, v, kv_row, e0, g.dim, active, T(1));
#pragma unroll
  for (int d = 0; d < DPT; ++d) dk[d] = dv[d] = T(0);
  // Queries that see some key of [ks, ke): [ks, min(len - 1, ke - 2 + W)] (query_tiles_for_keys).
  const index_t q_first = ks;
  const index_t q_last = g.window > 0 && ke - 2 + g.window < w.len - 1 ? ke - 2 + g.window : w.len - 1;
  for (index_t hg = 0; hg < g.group; ++hg) {
    const index_t h = kvh * g.group + hg;
    for (index_t c0 = q_first; c0 <= q_last; c0 += kQueryChunk) {
      const int n = static_cast<int>(q_last - c0 + 1 < kQueryChunk ? q_last - c0 + 1 : kQueryChunk);
      __syncthreads();  // the previous chunk's readers are done
      stage_rows<T, DPT, TPR>(q_staged, q, w.b, w.start, c0, n, g.seq, g.heads, h, g.dim, g.scale);
      stage_rows<T, DPT, TPR>(do_staged, grad_o, w.b, w.start, c0, n, g.seq, g.heads, h, g.dim, T(1));
      for (int r = threadIdx.x; r < n; r += kBlockThreads) {
        const index_t at = (w.b * g.seq + w.start + c0 + r) * g.heads + h;
        lse_staged[r] = lse[at];
        d_staged[r] = drow[at];
      }
      __syncthreads();
      for (int r = 0; r < n; ++r) {  // n is the same for the whole block
        const T* q_i = q_staged + r * L::kRow + part * L::kSlice;
        const T* do_i = do_staged + r * L::kRow + part * L::kSlice;
        T t;
        const T score = capped(row_sum<TPR>(slice_dot<DPT>(kr, q_i)), g.cap, t);
        const T dp = row_sum<TPR>(slice_dot<DPT>(vr, do_i));
        if (!active || !attention::visible(c0 + r, j, g.window)) continue;
        const T p = exp_of(score - lse_staged[r]);
        const T ds = p * (dp - d_staged[r]) * (g.cap > T(0) ? T(1) - t * t : T(1));
        slice_axpy<DPT>(dv, p, do_i);
        slice_axpy<DPT>(dk, ds, q_i);  // q_i carries `scale`
      }
    }
  }
  if (!active) return;
#pragma unroll
  for (int d = 0; d < DPT; ++d) {
    if (e0 + d >= g.dim) continue;
    if (grad_k) grad_k[kv_row + e0 + d] += dk[d];
    if (grad_v) grad_v[kv_row + e0 + d] += dv[d];
  }
}

// ---- backward, pass 2: dQ; one block per (document query tile, query head) -----------------------
template <class T, int DPT, int TPR>
__global__ void __launch_bounds__(kBlockThreads)
    query_grad_kernel(Geometry<T> g, const WorkTile* work, const T* q, const T* k, const T* v, const T* grad_o,
                      const T* lse, const T* drow, T* grad_q) {
  using L = RowLayout<DPT, TPR>;
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  T* k_staged = reinterpret_cast<T*>(shared_bytes);  // (kKeyTile, kRow)
  T* v_staged = k_staged + kKeyTile * L::kRow;        // (kKeyTile, kRow)
  const QueryTileRow<DPT, TPR> r(g, work);
  T qr[DPT], dor[DPT], dq[DPT];
  load_slice<T, DPT>(qr, q, r.row, r.e0, g.dim, r.active, g.scale);
  load_slice<T, DPT>(dor, grad_o, r.row, r.e0, g.dim, r.active, T(1));
#pragma unroll
  for (int d = 0; d < DPT; ++d) dq[d] = T(0);
  const T lse_i = r.active ? lse[r.row / g.dim] : T(0);
  const T d_i = r.active ? drow[r.row / g.dim] : T(0);
  for_each_key_tile(g, r, k, v, k_staged, v_staged, [&](index_t first_key, int n) {
    for (int j = 0; j < n; ++j) {  // n is the same for the whole block
      const T* k_j = k_staged + j * L::kRow + r.part * L::kSlice;
      T t;
      const T score = capped(row_sum<TPR>(slice_dot<DPT>(qr, k_j)), g.cap, t);
      const T dp = row_sum<TPR>(slice_dot<DPT>(dor, v_staged + j * L::kRow + r.part * L::kSlice));
      if (!r.active || !attention::visible(r.i, first_key + j, g.window)) continue;
      const T p = exp_of(score - lse_i);
      const T ds = p * (dp - d_i) * (g.cap > T(0) ? T(1) - t * t : T(1));
      slice_axpy<DPT>(dq, ds, k_j);
    }
  });
  if (!r.active) return;
#pragma unroll
  for (int d = 0; d < DPT; ++d)
    if (r.e0 + d < g.dim) grad_q[r.row + r.e0 + d] += g.scale * dq[d];
}

}  // namespace megacpp::cuda::flash
