// CUDA backend: the host side of the bf16 tensor-core attention (kernels in detail/attention_mma.cuh):
// the option that turns it on (Bf16Attention, per host thread), the head dims it takes, the shared
// memory each kernel needs, and the launches over the same per-document work list and with the
// same AttentionStats as the fp32 kernel (detail/attention_launch.cuh).
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <type_traits>

#include "megacpp/backends/cuda/detail/attention_launch.cuh"
#include "megacpp/backends/cuda/detail/attention_mma.cuh"
#include "megacpp/backends/cuda/detail/thread_option.cuh"

namespace megacpp::cuda::flash {

// bf16 tensor-core attention for float inputs: q, k, v, dO, P and dS rounded to bf16 (8-bit
// mantissa), fp32 sums and softmax, ~1e-3 relative error instead of float's ~1e-6, for the tensor
// cores' throughput. Asked for by the op (AttentionParams::products: a Bf16Mixed model's attention,
// forward and backward alike), or forced on or off for a scope on this host thread.
/// While alive, FusedAttention<Cuda> on float tensors runs the bf16 tensor-core kernels on this
/// host thread (enabled = true) or the fp32 ones (false), whatever precision the op asked for; the
/// previous choice comes back when it ends, and outside every scope the op's precision decides.
/// Head dims above tensor_core::kMaxHeadDim, and double, always take the fp32 kernels. The scope is
/// read when a kernel runs: keep it open over a forward and its backward (P recomputed in fp32 from
/// a bf16 forward's LSE would not match it).
using Bf16Attention = ThreadOption<struct Bf16AttentionTag>;

namespace tensor_core {

// head_dim 1..128 (zero padded to 64 or 128: with_padded_dim, attention_mma_tiles.cuh); wider heads would need
// the dK/dV accumulators (2 x head_dim / 16 fragments per lane) out of registers.
inline constexpr index_t kMaxHeadDim = 128;

// Whether this call takes the tensor-core kernels: float, bf16 products (the scope's choice, else
// the op's), a head dim they hold.
template <class T>
bool selected(const kernels::AttentionParams& p) {
  const bool bf16 = Bf16Attention::choice().value_or(p.products == MatmulPrecision::bf16);
  return std::is_same_v<T, float> && bf16 && p.head_dim >= 1 && p.head_dim <= kMaxHeadDim;
}

// Shared memory of each kernel at width D (the plans of attention_mma_tiles.cuh, built from a null base).
template <int D>
std::size_t forward_shared_bytes() { return ForwardShared<D>(nullptr).bytes; }
template <int D>
std::size_t key_value_shared_bytes() { return KeyValueShared<D>(nullptr).bytes; }
template <int D>
std::size_t query_shared_bytes() { return QueryShared<D>(nullptr).bytes; }

// The launch checks on the host: the kernel's shared memory against the device's per-block
// opt-in limit (H100: 227 KB), then the opt-in above 48 KB.
template <class Kernel>
void prepare_launch(Kernel kernel, const char* name, std::size_t shared) {
  int device = 0, limit = 0;
  MEGACPP_CUDA_CHECK(cudaGetDevice(&device));
  MEGACPP_CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  check(shared <= static_cast<std::size_t>(limit), "FusedAttention<Cuda> bf16", name, " needs ", shared,
        " bytes of shared memory per block, the device allows ", limit);
  allow_shared_memory(kernel, shared);
}

// The blocks of `kernel` the device holds at once: its SMs x the blocks an SM takes at `shared`
// bytes each (registers and shared memory decide), for the dK/dV pass's splits.
template <class Kernel>
index_t resident_blocks(Kernel kernel, std::size_t shared) {
  int device = 0, sms = 0, per_sm = 0;
  MEGACPP_CUDA_CHECK(cudaGetDevice(&device));
  MEGACPP_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  MEGACPP_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kBlockThreads, shared));
  return static_cast<index_t>(sms) * per_sm;
}

// The bf16 copy of a (batch, seq, heads, dim) float tensor the kernels read, for one call: rows
// of bf16_row_width(dim), zero columns past dim (attention_mma_tiles.cuh, stage_rows).
class Bf16Rows {
 public:
  Bf16Rows(const float* src, index_t rows, index_t dim)
      : width_(bf16_row_width(dim)), copy_(static_cast<std::size_t>(rows * width_)) {
    to_bf16_rows_kernel<float><<<grid_for(bf16_row_pieces(rows, width_)), kThreads, 0, kStream>>>(rows, dim, width_, src, copy_.get());
    MEGACPP_CUDA_CHECK_LAUNCH(to_bf16_rows_kernel);
  }
  const nv_bf16* get() const { return copy_.get(); }
  index_t width() const { return width_; }

 private:
  index_t width_;
  DeviceBuffer<nv_bf16> copy_;
};

// The bf16 copies of q, k and v a forward reads; kept for its backward (kernels::AttentionSaved)
// when the op asks, so the backward reads the same bits without making them again.
struct OperandCopies {
  Bf16Rows q, k, v;
  OperandCopies(const float* q_src, const float* k_src, const float* v_src, index_t q_rows, index_t kv_rows, index_t dim)
      : q(q_src, q_rows, dim), k(k_src, kv_rows, dim), v(v_src, kv_rows, dim) {}
};

// The bf16 copy of dO the backward's kernels read, and D = rowsum(bf16(dO) o O) per row, from one
// pass over dO (grad_output_rows_kernel).
class GradOutputRows {
 public:
  GradOutputRows(const float* grad_o, const float* o, index_t rows, index_t dim)
      : width_(bf16_row_width(dim)), copy_(static_cast<std::size_t>(rows * width_)), drow_(static_cast<std::size_t>(rows)) {
    grad_output_rows_kernel<float><<<grid_for(grad_row_threads(rows)), kThreads, 0, kStream>>>(rows, dim, width_, grad_o, o,
                                                                                              copy_.get(), drow_.get());
    MEGACPP_CUDA_CHECK_LAUNCH(grad_output_rows_kernel);
  }
  const nv_bf16* get() const { return copy_.get(); }  // rows of width()
  const float* drow() const { return drow_.get(); }   // D: (batch, seq, heads)
  index_t width() const { return width_; }

 private:
  index_t width_;
  DeviceBuffer<nv_bf16> copy_;
  DeviceBuffer<float> drow_;
};

/// o, lse from q, k, v in bf16 on the tensor cores (padding tokens: o = 0, lse = -inf); the bf16
/// copies stay in a.saved when it is given.
template <class B>
AttentionStats forward(const kernels::AttentionParams& p, const DocumentLayout<B>& docs,
                       const kernels::AttentionForwardArgs<float>& a) {
  const Geometry<float> g = geometry<float>(p);
  const index_t tokens = p.batch * p.seq;
  if (has_padding(docs)) {  // else the kernel writes every row
    MEGACPP_CUDA_CHECK(cudaMemsetAsync(a.o, 0, static_cast<std::size_t>(tokens * p.heads * p.head_dim) * sizeof(float), kStream));
    fill<float>(a.lse, static_cast<std::size_t>(tokens * p.heads), -std::numeric_limits<float>::infinity());
  }
  AttentionStats stats;
  stats.q_rows = kTileRows;
  stats.tile_k = kKeyStep;
  stats.products = MatmulPrecision::bf16;
  const DeviceWork& work = device_work(docs, kTileRows, TileOrder::late_queries_first);
  count_query_tiles(work.host, kTileRows, kKeyStep, p.heads, p.window, stats);
  if (work.count() == 0) return stats;
  const auto copies = std::make_shared<const OperandCopies>(a.q, a.k, a.v, tokens * p.heads,
                                                            p.batch * p.seq * p.kv_heads, p.head_dim);
  const OperandCopies& c = *copies;
  with_padded_dim(p.head_dim, [&]<int D>() {
    const std::size_t shared = forward_shared_bytes<D>();
    prepare_launch(forward_kernel<D>, "forward", shared);
    forward_kernel<D><<<block_grid("forward", work.count(), p.heads), kBlockThreads, shared, kStream>>>(
        g, work.device.get(), c.q.width(), c.q.get(), c.k.get(), c.v.get(), a.o, a.lse);
    MEGACPP_CUDA_CHECK_LAUNCH(forward_kernel);
  });
  if (a.saved) a.saved->state = copies;
  return stats;
}

/// Adds dq, dk, dv (each may be null) in bf16 on the tensor cores: the bf16 dO and
/// D = rowsum(bf16(dO) o O) in fp32, then dK/dV by key tile, then dQ by query tile. Reads the
/// forward's bf16 copies of q, k, v from a.saved when it kept them, else makes them.
template <class B>
AttentionStats backward(const kernels::AttentionParams& p, const DocumentLayout<B>& docs,
                        const kernels::AttentionBackwardArgs<float>& a) {
  AttentionStats stats;
  if (!a.grad_q && !a.grad_k && !a.grad_v) return stats;
  const Geometry<float> g = geometry<float>(p);
  const index_t rows = p.batch * p.seq * p.heads;
  const GradOutputRows grad_o(a.grad_o, a.o, rows, p.head_dim);
  const float* drow = grad_o.drow();
  stats.two_pass = true;
  stats.q_rows = kTileRows;
  stats.tile_k = kKeyStep;
  stats.products = MatmulPrecision::bf16;
  // Query tiles and key tiles alike are 64 tokens; each pass starts its heaviest blocks first.
  const DeviceWork& key_work = device_work(docs, kTileRows, TileOrder::early_keys_first);
  const DeviceWork& query_work = device_work(docs, kTileRows, TileOrder::late_queries_first);
  if (query_work.count() == 0) return stats;
  std::optional<OperandCopies> made;  // only when the forward kept none
  const OperandCopies* kept = a.saved ? static_cast<const OperandCopies*>(a.saved->state.get()) : nullptr;
  if (!kept) kept = &made.emplace(a.q, a.k, a.v, rows, p.batch * p.seq * p.kv_heads, p.head_dim);
  const Bf16Rows &q = kept->q, &k = kept->k, &v = kept->v;
  with_padded_dim(p.head_dim, [&]<int D>() {
    if (a.grad_k || a.grad_v) {
      const std::size_t shared = key_value_shared_bytes<D>();
      prepare_launch(key_value_grad_kernel<D>, "dK/dV", shared);
      const index_t splits = key_value_splits(key_work.count() * p.kv_heads, p.heads / p.kv_heads,
                                              resident_blocks(key_value_grad_kernel<D>, shared));
      // Split 0 adds into dK, dV; the others into zeroed partial sums, then summed into dK, dV.
      const index_t n = p.batch * p.seq * p.kv_heads * p.head_dim, slices = splits - 1;
      std::optional<DeviceBuffer<float>> partial_k, partial_v;
      if (slices > 0) {
        const std::size_t elements = static_cast<std::size_t>(slices * n);
        if (a.grad_k) partial_k.emplace(elements);
        if (a.grad_v) partial_v.emplace(elements);
        for (const auto* partial : {&partial_k, &partial_v})
          if (*partial) MEGACPP_CUDA_CHECK(cudaMemsetAsync((*partial)->get(), 0, elements * sizeof(float), kStream));
      }
      float* into_k = partial_k ? partial_k->get() : nullptr;
      float* into_v = partial_v ? partial_v->get() : nullptr;
      key_value_grad_kernel<D><<<block_grid("dK/dV", key_work.count(), p.kv_heads * splits), kBlockThreads, shared, kStream>>>(
          g, key_work.device.get(), q.width(), q.get(), k.get(), v.get(), grad_o.get(), a.lse, drow, a.grad_k, a.grad_v,
          into_k, into_v, splits, n);
      MEGACPP_CUDA_CHECK_LAUNCH(key_value_grad_kernel);
      if (slices > 0) {
        if (fits_packets<float>(n, {into_k, into_v, a.grad_k, a.grad_v})) {
          using V = Packet<float>;
          const index_t vectors = n / V::kSize;
          sum_splits_kernel<float, V::kSize><<<grid_for(vectors), kThreads, 0, kStream>>>(
              vectors, slices, vectors, reinterpret_cast<const V*>(into_k), reinterpret_cast<V*>(a.grad_k),
              reinterpret_cast<const V*>(into_v), reinterpret_cast<V*>(a.grad_v));
        } else {
          using V = Vec<float, 1>;
          sum_splits_kernel<float, 1><<<grid_for(n), kThreads, 0, kStream>>>(
              n, slices, n, reinterpret_cast<const V*>(into_k), reinterpret_cast<V*>(a.grad_k),
              reinterpret_cast<const V*>(into_v), reinterpret_cast<V*>(a.grad_v));
        }
        MEGACPP_CUDA_CHECK_LAUNCH(sum_splits_kernel);
      }
    }
    if (a.grad_q) {
      count_query_tiles(query_work.host, kTileRows, kKeyStep, p.heads, p.window, stats);
      const std::size_t shared = query_shared_bytes<D>();
      prepare_launch(query_grad_kernel<D>, "dQ", shared);
      query_grad_kernel<D><<<block_grid("dQ", query_work.count(), p.heads), kBlockThreads, shared, kStream>>>(
          g, query_work.device.get(), q.width(), q.get(), k.get(), v.get(), grad_o.get(), a.lse, drow, a.grad_q);
      MEGACPP_CUDA_CHECK_LAUNCH(query_grad_kernel);
    }
  });
  return stats;
}

}  // namespace tensor_core
}  // namespace megacpp::cuda::flash
