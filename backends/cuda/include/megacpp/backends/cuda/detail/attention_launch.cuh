// CUDA backend: the host side of the fused attention (kernels in detail/attention.cuh): the
// per-document work list, the choice of row layout from head_dim, the launches, and the same
// AttentionStats the CPU kernel reports (tiles and score elements actually computed).
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "megacpp/backends/cuda/detail/attention.cuh"
#include "megacpp/backends/cuda/detail/check.cuh"
#include "megacpp/backends/cuda/detail/elementwise_launch.cuh"
#include "megacpp/backends/cuda/detail/memory.cuh"
#include "megacpp/core/kernels/documents.hpp"

namespace megacpp::cuda::flash {

inline constexpr index_t kMaxHeadDim = 256;  // the largest row layout instantiated below

// The work list on the host (for the statistics) and in device memory.
struct DeviceWork {
  std::vector<WorkTile> host;
  DeviceBuffer<WorkTile> device;
  explicit DeviceWork(std::vector<WorkTile> tiles) : host(std::move(tiles)), device(host.size()) {
    copy_from_host<WorkTile>(device.get(), host.data(), host.size());
  }
  unsigned count() const { return static_cast<unsigned>(host.size()); }
};

// The layout's work list of `rows`-token tiles in `order`, planned and uploaded by the first call that needs
// it and kept with the layout (kernels::DerivedPlans): every later attention call on the same batch,
// forward or backward, in any layer, launches without a host-to-device copy that would wait for the
// GPU to drain.
template <class B>
const DeviceWork& device_work(const DocumentLayout<B>& docs, index_t rows, TileOrder order = TileOrder::documents) {
  return docs.plans->template get<DeviceWork>(
      {rows, static_cast<index_t>(order)}, [&] { return std::make_shared<DeviceWork>(document_tiles(docs.spans, rows, order)); });
}

// Whether some token of the layout is in no span (padding, from_spans only). The forward kernels
// write o and lse for every row of their tiles and never visit a padding token, so only then does
// the forward first set o = 0 and lse = -inf for every token: a packed batch skips that pass over o
// (25 us at batch 2 x 4096, 16 heads of 128 on an H100).
template <class B>
bool has_padding(const DocumentLayout<B>& docs) {
  return spans_leave_padding(docs.spans, docs.batch * docs.seq);
}

// Tile pairs and score elements a query-tile kernel (query tiles of `rows`, key tiles of `tile_k`)
// computes for `heads` heads (as the CPU counts).
inline void count_query_tiles(const std::vector<WorkTile>& work, index_t rows, index_t tile_k, index_t heads,
                              index_t window, AttentionStats& stats) {
  for (const WorkTile& w : work) {
    const index_t qs = static_cast<index_t>(w.tile) * rows, qe = qs + rows < w.len ? qs + rows : w.len;
    const attention::TileRange kr = attention::key_tiles_for_queries(qs, qe, tile_k, window);
    for (index_t kt = kr.first; kt < kr.last; ++kt) {
      const index_t end = (kt + 1) * tile_k < w.len ? (kt + 1) * tile_k : w.len;
      const attention::TileRange keys = attention::computed_keys(qs, qe, kt * tile_k, end, window);
      stats.tiles += heads;
      stats.scores += heads * (qe - qs) * (keys.last - keys.first);
    }
  }
}

template <class T>
Geometry<T> geometry(const kernels::AttentionParams& p) {
  check(p.head_dim <= kMaxHeadDim, "FusedAttention<Cuda>", "head_dim ", p.head_dim, " is above the CUDA kernel's ",
        kMaxHeadDim, " (its largest register layout)");
  check(p.heads <= 65535 && p.kv_heads <= 65535, "FusedAttention<Cuda>", "heads ", p.heads,
        " exceed the grid's y dimension (65535)");
  return {p.seq, p.heads, p.kv_heads, p.head_dim, p.group(), p.window, static_cast<T>(p.scale), static_cast<T>(p.softcap)};
}

// Dynamic shared memory above the default 48 KB needs an opt-in per kernel (H100: up to 227 KB).
template <class Kernel>
void allow_shared_memory(Kernel kernel, std::size_t bytes) {
  if (bytes > 48 * 1024)
    MEGACPP_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

/// o, lse from q, k, v: padding tokens get o = 0 and lse = -inf, every document's query tiles
/// one block per head.
template <class T, class B>
AttentionStats forward(const kernels::AttentionParams& p, const DocumentLayout<B>& docs,
                       const kernels::AttentionForwardArgs<T>& a) {
  const Geometry<T> g = geometry<T>(p);
  const index_t tokens = p.batch * p.seq;
  if (has_padding(docs)) {
    MEGACPP_CUDA_CHECK(cudaMemsetAsync(a.o, 0, static_cast<std::size_t>(tokens * p.heads * p.head_dim) * sizeof(T), kStream));
    fill<T>(a.lse, static_cast<std::size_t>(tokens * p.heads), -std::numeric_limits<T>::infinity());
  }
  AttentionStats stats;
  with_row_layout(p.head_dim, [&]<int DPT, int TPR>() {
    using L = RowLayout<DPT, TPR>;
    const DeviceWork& work = device_work(docs, L::kRowsPerBlock);
    stats.q_rows = L::kRowsPerBlock;
    stats.tile_k = kKeyTile;
    count_query_tiles(work.host, L::kRowsPerBlock, kKeyTile, p.heads, p.window, stats);
    if (work.count() == 0) return;
    const std::size_t shared = 2 * kKeyTile * L::kRow * sizeof(T);
    allow_shared_memory(forward_kernel<T, DPT, TPR>, shared);
    forward_kernel<T, DPT, TPR><<<dim3(work.count(), static_cast<unsigned>(p.heads)), kBlockThreads, shared, kStream>>>(
        g, work.device.get(), a.q, a.k, a.v, a.o, a.lse);
    MEGACPP_CUDA_CHECK_LAUNCH(forward_kernel);
  });
  return stats;
}

/// Adds dq, dk, dv (each may be null): D = rowsum(dO o O), then dK/dV by key tile, then dQ by
/// query tile (always FlashAttention-2's two passes on the GPU: one writer per gradient row).
template <class T, class B>
AttentionStats backward(const kernels::AttentionParams& p, const DocumentLayout<B>& docs,
                        const kernels::AttentionBackwardArgs<T>& a) {
  AttentionStats stats;
  if (!a.grad_q && !a.grad_k && !a.grad_v) return stats;
  const Geometry<T> g = geometry<T>(p);
  const index_t rows = p.batch * p.seq * p.heads;
  const DeviceBuffer<T> drow_buffer(static_cast<std::size_t>(rows));  // D = rowsum(dO o O): (batch, seq, heads)
  T* drow = drow_buffer.get();
  output_dot_kernel<T><<<grid_for(rows * 32), kThreads, 0, kStream>>>(rows, p.head_dim, a.o, a.grad_o, drow);
  MEGACPP_CUDA_CHECK_LAUNCH(output_dot_kernel);
  stats.two_pass = true;
  with_row_layout(p.head_dim, [&]<int DPT, int TPR>() {
    using L = RowLayout<DPT, TPR>;
    const DeviceWork& work = device_work(docs, L::kRowsPerBlock);
    stats.q_rows = L::kRowsPerBlock;
    stats.tile_k = kKeyTile;
    if (work.count() == 0) return;
    if (a.grad_k || a.grad_v) {
      const std::size_t shared = (2 * kQueryChunk * L::kRow + 2 * kQueryChunk) * sizeof(T);
      allow_shared_memory(key_value_grad_kernel<T, DPT, TPR>, shared);
      key_value_grad_kernel<T, DPT, TPR><<<dim3(work.count(), static_cast<unsigned>(p.kv_heads)), kBlockThreads, shared,
                                           kStream>>>(g, work.device.get(), a.q, a.k, a.v, a.grad_o, a.lse, drow, a.grad_k,
                                                      a.grad_v);
      MEGACPP_CUDA_CHECK_LAUNCH(key_value_grad_kernel);
    }
    if (a.grad_q) {
      count_query_tiles(work.host, L::kRowsPerBlock, kKeyTile, p.heads, p.window, stats);
      const std::size_t shared = 2 * kKeyTile * L::kRow * sizeof(T);
      allow_shared_memory(query_grad_kernel<T, DPT, TPR>, shared);
      query_grad_kernel<T, DPT, TPR><<<dim3(work.count(), static_cast<unsigned>(p.heads)), kBlockThreads, shared,
                                       kStream>>>(g, work.device.get(), a.q, a.k, a.v, a.grad_o, a.lse, drow, a.grad_q);
      MEGACPP_CUDA_CHECK_LAUNCH(query_grad_kernel);
    }
  });
  return stats;
}

}  // namespace megacpp::cuda::flash
