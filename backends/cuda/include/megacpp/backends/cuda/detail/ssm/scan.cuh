// CUDA backend: the SSM scan, part 1 of 4: what the passes share (contract:
// megacpp/core/kernels/ssm_scan.hpp; CPU reference: cpu/detail/ssm/{common,forward,backward}.hpp).
// scan_chunks.cuh carries states and gradients across chunks; scan_forward.cuh and
// scan_backward.cuh hold the per-chunk passes and the launches.
//
// Per (batch row b, head h), with U_t = sum_r k_{t,r}^T v_{t,r} ((N, P) in the state's layout):
//
//   pre_t = H_{t-1} + shift_t U_{t-1}          the state entering token t (0 at a document start)
//   H_t   = alpha_t pre_t + gamma_t U_t,       alpha_t = exp(log_alpha_t)
//   y_{t,r} = H_t^T q_{t,r} + D_h v_{t,r}
//
// the recurrence of megacpp/nn/mamba/sequential_scan.hpp (Mamba-3's trapezoid, arXiv 2603.15569;
// Mamba-2's SSD with shift = 0, arXiv 2405.21060), walked token by token inside each chunk rather
// than in the CPU's chunked matrix form: O(T N P) work, with no intra-chunk matrices. The chunk
// plan is the contract's (plan_row_chunks on the host, uploaded as a table once per layout and
// chunk size: device_chunks below); chunks never cross a document. The state entering chunk c,
// E_c = pre_t at its first token (0 at a document's first chunk), is exactly the CPU's saved
// "state entering the chunk", so the two backends' chunk states are interchangeable.
//
// Parallel over chunks: the state is linear in E_c with one scalar decay per token, so a chunk's
// last state is  H_end = A_c E_c + L_c,  A_c = prod of the chunk's alphas (a document's first
// token has none), L_c = H_end computed from E_c = 0; then E_{c+1} = H_end + shift U_end when
// chunk c + 1 continues the document, 0 when it starts one. The forward runs
//   1. one block per (b, h, chunk), all at once: L_c and A_c (scan_chunks.cuh)
//   2. one thread per (b, h, n, p): E_c along the row's chunks, in order (scan_chunks.cuh)
//   3. one block per (b, h, chunk): the chunk's tokens from E_c, writing y (scan_forward.cuh)
// and the backward the same in reverse for the gradient flowing out of a chunk's first token
// (scan_backward.cuh), the blocked form of the chunked scans of Mamba-2 (arXiv 2405.21060,
// section 6: intra-chunk, inter-chunk state passing, output) with the recurrence inside a chunk.
//
// In a per-chunk block the threads own the (N, P) state elements (thread i owns e = i,
// i + blockDim, ...; n = e / P, p = e % P), each element's chain over tokens on one thread; the
// state lives in global scratch (L1/L2 resident), so N P may be any size: shared memory holds only
// block_reduce's 32 values and the runs' parts below (kThreads values per set of sums). Sums
// across elements (y and dv over n, dq and dk over p, the per-token scalars over (n, p)) run after
// a __syncthreads, each in a fixed order: runs of consecutive terms on different threads, each in
// index order, then the runs in order (SumSplit below; one run per output when the block has no
// room for two), or block_sum's fixed tree. Every token's outputs and gradients are
// written by its own chunk's block (a neighbour chunk's values are only read). No atomics:
// bitwise reproducible.
//
// Every per-thread step is a MEGACPP_HD function: the kernels call them between barriers, and a
// host program can call the same functions in loops over blocks and threads to check the
// algorithm against SsmScan<Cpu> without a GPU. That is how this code was checked (every case of
// tests/support/kernel_cases/ssm_scan.hpp and more, ~1e-15 relative in double, against the CPU
// and against the earlier serial kernels); compiled by the CUDA build.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "megacpp/backends/cuda/detail/check.cuh"
#include "megacpp/backends/cuda/detail/memory.cuh"
#include "megacpp/core/config.hpp"
#include "megacpp/core/error.hpp"
#include "megacpp/core/kernels/documents.hpp"
#include "megacpp/core/kernels/ssm_scan.hpp"

namespace megacpp::cuda::ssm {

using kernels::ScanChunk;
using kernels::ScanParams;

// Blocks of a per-chunk launch that needs per-block scratch (items beyond it are grid-strided),
// and so the number of per-block scratch slots it allocates: as many as an H100 (132 SMs) holds
// at once, by ptxas -v's registers for 256 threads (sm_90: forward pass 3 72 in float, 80 in
// double: 3 blocks per SM; backward pass 3 126 and 128: 2). Launches without per-block scratch use
// one block per item (grid_per_item).
inline constexpr index_t kForwardChunkBlocks = 3 * 132;
inline constexpr index_t kBackwardChunkBlocks = 2 * 132;

// The host-side sizes of the launches (scan_launch.cuh, and the emulation that mirrors it):
// pass 3's blocks for `items` chunk items, and the backward's rows of states per block.
inline index_t forward_chunk_blocks(index_t items) { return items < kForwardChunkBlocks ? items : kForwardChunkBlocks; }
inline index_t backward_chunk_blocks(index_t items) { return items < kBackwardChunkBlocks ? items : kBackwardChunkBlocks; }
inline index_t backward_chunk_rows(const ScanParams& sh) { return sh.chunk_size < sh.seq ? sh.chunk_size : sh.seq; }

// What every thread of a scan kernel reads. chunks: (batch, max_chunks) on the device, each row's
// plan_row_chunks in order, padded with length-0 entries.
template <class T>
struct ScanView {
  ScanParams sh;
  kernels::ScanOperands<T> in;
  const ScanChunk* chunks = nullptr;

  MEGACPP_HD index_t state_size() const { return sh.d_state * sh.head_dim; }
  // Offsets of token bt = b * seq + t's rows for head h: q, k (R, N) of h's group; v, y (R, P);
  // per-head gradients dq, dk (R, N); the per-token scalars.
  MEGACPP_HD index_t qk_row(index_t bt, index_t h) const {
    return (bt * sh.groups + h / (sh.heads / sh.groups)) * sh.rank * sh.d_state;
  }
  MEGACPP_HD index_t vy_row(index_t bt, index_t h) const { return (bt * sh.heads + h) * sh.rank * sh.head_dim; }
  MEGACPP_HD index_t dqk_row(index_t bt, index_t h) const { return (bt * sh.heads + h) * sh.rank * sh.d_state; }
  MEGACPP_HD index_t scalar(index_t bt, index_t h) const { return bt * sh.heads + h; }
  // Chunk ci of row b (length 0 past the row's last chunk).
  MEGACPP_HD ScanChunk chunk(index_t b, index_t ci) const { return chunks[b * sh.max_chunks + ci]; }
  // Per-chunk items of the parallel passes: item = (b * heads + h) * max_chunks + ci; item also
  // indexes the (batch, heads, max_chunks) scalars, item * N P the (N, P) slots.
  MEGACPP_HD index_t chunk_items() const { return sh.batch * sh.heads * sh.max_chunks; }
  // The saved state entering chunk ci of (b, h): (N, P) in chunk_states.
  MEGACPP_HD index_t saved_state(index_t b, index_t h, index_t ci) const {
    return ((b * sh.heads + h) * sh.max_chunks + ci) * state_size();
  }
};

// U_t[n, p] = sum_r k_{t,r,n} v_{t,r,p} for token bt and head h (r in order).
template <class T>
MEGACPP_HD T rank_input(const ScanView<T>& s, index_t bt, index_t h, index_t n, index_t p) {
  const index_t N = s.sh.d_state, P = s.sh.head_dim;
  const T* k = s.in.k + s.qk_row(bt, h);
  const T* v = s.in.v + s.vy_row(bt, h);
  T u = T(0);
  for (index_t r = 0; r < s.sh.rank; ++r) u += k[r * N + n] * v[r * P + p];
  return u;
}

// pre_t[n, p] = H_{t-1}[n, p] + shift_t U_{t-1}[n, p] for a token t that does not start a document.
template <class T>
MEGACPP_HD T entering_state(const ScanView<T>& s, index_t bt, index_t h, T h_prev, index_t n, index_t p) {
  if (!s.in.shift) return h_prev;
  return h_prev + s.in.shift[s.scalar(bt, h)] * rank_input(s, bt - 1, h, n, p);
}

// H_t[n, p] = alpha_t pre_t + gamma_t U_t; at a document's first token only gamma_t U_t (its
// alpha multiplies a zero state, and the CPU kernel never reads that log_alpha either).
template <class T>
MEGACPP_HD T next_state(const ScanView<T>& s, index_t bt, index_t h, bool doc_start, T pre, index_t n, index_t p) {
  using std::exp;  // block scope: hides megacpp::exp (the autograd op) from the call below
  const T gu = s.in.gamma[s.scalar(bt, h)] * rank_input(s, bt, h, n, p);
  return doc_start ? gu : exp(s.in.log_alpha[s.scalar(bt, h)]) * pre + gu;
}

// H_t[n, p] at token i of chunk c (first token bt0) from H_{t-1} (`h_prev`, read for i > 0) and the
// state entering the chunk (`entering`, read at i = 0 unless the chunk starts its document): the
// one step every pass walks a chunk with (local states from 0, the forward from E_c, the
// backward's recompute from the saved state).
template <class T>
MEGACPP_HD T chunk_token_state(const ScanView<T>& s, index_t bt0, index_t h, const ScanChunk& c, index_t i, T h_prev,
                               T entering, index_t n, index_t p) {
  const bool doc_start = i == 0 && c.first_in_doc;
  const T pre = doc_start ? T(0) : i == 0 ? entering : entering_state(s, bt0 + i, h, h_prev, n, p);
  return next_state(s, bt0 + i, h, doc_start, pre, n, p);
}

// A set of a token's per-output sums split across a block (the y, dq, dk and dv contractions of
// scan_forward.cuh and scan_backward.cuh): `outputs` sums of `terms` terms each, every sum cut into
// `slices` runs of consecutive terms, run k of output j summed in order by work item
// w = k * outputs + j into partials[w], then the runs added in run order by the output's thread.
// One thread walking all the terms is a chain of dependent loads from L2 as long as the sum; the
// split makes it about terms / slices + slices long, with every work item a different thread
// while outputs * slices <= threads. slices = 1 (one thread per output walks every term, no
// partials) where fewer than 2 runs per output fit the block; at most kThreads work items (the
// kernels' partials arrays hold kThreads values per set) and at least one term per run.
struct SumSplit {
  index_t outputs = 0, terms = 0, slices = 1;

  MEGACPP_HD index_t items() const { return slices > 1 ? outputs * slices : 0; }
  MEGACPP_HD index_t begin(index_t run) const { return run * terms / slices; }
  MEGACPP_HD index_t end(index_t run) const { return (run + 1) * terms / slices; }
};

MEGACPP_HD SumSplit split_sums(index_t outputs, index_t terms, index_t threads) {
  const index_t lanes = threads < kThreads ? threads : kThreads;
  index_t slices = outputs > 0 ? lanes / outputs : 1;
  if (slices > terms) slices = terms;
  return {outputs, terms, slices >= 2 ? slices : 1};
}

// The runs' parts of output j of a split (parts[run * outputs + j]) added in run order, after acc.
template <class T>
MEGACPP_HD T add_runs(const SumSplit& split, const T* parts, index_t j, T acc) {
  for (index_t run = 0; run < split.slices; ++run) acc += parts[run * split.outputs + j];
  return acc;
}

// acc + sum_{p in [p0, p1)} M[n, p] x[p], p in order; M (N, P) row-major, as the state.
template <class T>
MEGACPP_HD T state_row_dot(const T* M, index_t P, index_t n, const T* x, index_t p0, index_t p1, T acc) {
  for (index_t p = p0; p < p1; ++p) acc += M[n * P + p] * x[p];
  return acc;
}

// acc + sum_{n in [n0, n1)} x[n] M[n, p], n in order.
template <class T>
MEGACPP_HD T state_column_dot(const T* M, index_t P, index_t p, const T* x, index_t n0, index_t n1, T acc) {
  for (index_t n = n0; n < n1; ++n) acc += x[n] * M[n * P + p];
  return acc;
}

// Checks the sizes: the statement of what the kernels assume.
inline void check_scan_sizes(const char* op, const ScanParams& sh, const std::vector<std::int32_t>& doc_ids) {
  check(sh.batch >= 0 && sh.seq >= 0 && sh.rank >= 1 && sh.d_state >= 1 && sh.head_dim >= 1 && sh.chunk_size >= 1, op,
        "sizes must be positive: rank ", sh.rank, ", d_state ", sh.d_state, ", head_dim ", sh.head_dim,
        ", chunk_size ", sh.chunk_size);
  check(sh.groups >= 1 && sh.heads % sh.groups == 0, op, "heads ", sh.heads, " are not a multiple of groups ",
        sh.groups, " (head h reads group h / (heads / groups))");
  check(static_cast<index_t>(doc_ids.size()) == sh.batch * sh.seq, op, "the layout's doc_ids_host holds ",
        doc_ids.size(), " ids, the scan has (batch, seq) = (", sh.batch, ", ", sh.seq, ")");
}

// Every row's chunk plan, (batch, max_chunks) padded with length-0 chunks: plan_row_chunks, as the
// CPU kernel plans.
inline std::vector<ScanChunk> plan_scan(const char* op, const ScanParams& sh, const std::vector<std::int32_t>& doc_ids) {
  std::vector<ScanChunk> table(static_cast<std::size_t>(sh.batch * sh.max_chunks)), row;
  for (index_t b = 0; b < sh.batch; ++b) {
    kernels::plan_row_chunks(doc_ids.data() + b * sh.seq, sh.seq, sh.chunk_size, row);
    check(static_cast<index_t>(row.size()) <= sh.max_chunks, op, "row ", b, " has ", row.size(),
          " chunks but max_chunks is ", sh.max_chunks, ": pass max_chunks_per_row(...) for this layout");
    for (std::size_t ci = 0; ci < row.size(); ++ci) table[static_cast<std::size_t>(b * sh.max_chunks) + ci] = row[ci];
  }
  return table;
}

// The chunk table on the device.
struct DeviceChunks {
  DeviceBuffer<ScanChunk> device;
  explicit DeviceChunks(const std::vector<ScanChunk>& table) : device(table.size()) {
    copy_from_host<ScanChunk>(device.get(), table.data(), table.size());
  }
};

// The layout's chunk table for (chunk_size, max_chunks), planned and uploaded by the first scan
// that needs it and kept with the layout (kernels::DerivedPlans): every later scan on the same
// batch, forward or backward, in any layer, launches without a host-to-device copy that would wait
// for the GPU to drain.
template <class B>
const DeviceChunks& device_chunks(const char* op, const ScanParams& sh, const DocumentLayout<B>& docs) {
  return docs.plans->template get<DeviceChunks>({sh.chunk_size, sh.max_chunks}, [&] {
    return std::make_shared<DeviceChunks>(plan_scan(op, sh, docs.doc_ids_host));
  });
}

}  // namespace megacpp::cuda::ssm
