// tests/cuda_emulation/attention_emulated.cpp: the launches of detail/attention_mma_launch.cuh and
// detail/attention_launch.cuh on the emulator. Those files launch with <<<>>>, allocate device
// memory and keep the work list with the layout, none of which a host compiler takes, so what they
// compute before a launch is mirrored here (each mirror says what it mirrors), calling the device
// headers' own host helpers for the rest: the work list (document_tiles), the layout and padded
// width choices, the bf16 row width, the shared-memory plans, grid_for. Host vectors stand in for
// device memory.
#include "attention_emulated.hpp"

#include <cstring>
#include <limits>

#include "device_code.hpp"
#include "emulator/launch.hpp"

namespace megacpp::cuda_emulation {
namespace {

namespace flash = megacpp::cuda::flash;
namespace tc = flash::tensor_core;
using attention_bf16_test::Inputs;
using attention_bf16_test::Problem;

// Mirrors geometry<float> (attention_launch.cuh); the scale resolved as kernels::attention_params does.
flash::Geometry<float> geometry(const Problem& p) {
  return {p.seq, p.heads, p.kv_heads, p.dim, p.heads / p.kv_heads, p.window, static_cast<float>(p.resolved_scale()),
          static_cast<float>(p.softcap)};
}

// Outputs as forward() leaves them before its kernel (attention_launch.cuh, has_padding).
AttentionRun prepared(const Problem& p, const AttentionRun& initial) {
  AttentionRun r = initial;
  // With padding tokens forward() sets o = 0 and lse = -inf first; without, it leaves them as they
  // were, here NaN: any element the kernel does not write shows in every check.
  const bool padding = flash::spans_leave_padding(p.spans, p.batch * p.seq);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  r.o.assign(static_cast<std::size_t>(p.batch * p.seq * p.heads * p.dim), padding ? 0.0f : nan);
  r.lse.assign(static_cast<std::size_t>(p.batch * p.seq * p.heads), padding ? -std::numeric_limits<float>::infinity() : nan);
  return r;
}

// The fp32 kernels' grid: (tile, head).
dim3 grid(const std::vector<flash::WorkTile>& work, index_t heads) {
  return dim3(static_cast<unsigned>(work.size()), static_cast<unsigned>(heads));
}
// The tensor-core kernels' one-dimensional grid (tensor_core::block_grid): a block per (tile, head).
dim3 tc_grid(const std::vector<flash::WorkTile>& work, index_t heads) {
  return tc::block_grid("emulated", static_cast<index_t>(work.size()), heads);
}

}  // namespace

namespace {
// Mirrors tensor_core::Bf16Rows (attention_mma_launch.cuh): the bf16 copy the kernels read.
std::vector<__nv_bfloat16> bf16_rows(const float* src, index_t rows, index_t dim) {
  const index_t width = tc::bf16_row_width(dim);
  std::vector<__nv_bfloat16> copy(static_cast<std::size_t>(rows * width));
  launch(tc::to_bf16_rows_kernel<float>, {dim3(cuda::grid_for(tc::bf16_row_pieces(rows, width))), dim3(cuda::kThreads), 0},
         rows, dim, width, src, copy.data());
  return copy;
}
std::vector<__nv_bfloat16> bf16_rows(const std::vector<float>& src, index_t dim) {
  return bf16_rows(src.data(), static_cast<index_t>(src.size()) / dim, dim);
}
}  // namespace

std::vector<std::uint16_t> emulated_bf16_rows(const float* src, index_t rows, index_t dim) {
  const std::vector<__nv_bfloat16> copy = bf16_rows(src, rows, dim);
  static_assert(sizeof(__nv_bfloat16) == sizeof(std::uint16_t), "bf16 is 16 raw bits");
  std::vector<std::uint16_t> bits(copy.size());
  std::memcpy(bits.data(), copy.data(), bits.size() * sizeof(std::uint16_t));
  return bits;
}

namespace {
// Mirrors tensor_core::GradOutputRows: dO's bf16 copy (rows of bf16_row_width(dim)) and D into drow.
std::vector<__nv_bfloat16> grad_output_rows(const float* grad_o, const float* o, index_t rows, index_t dim, float* drow) {
  const index_t width = tc::bf16_row_width(dim);
  std::vector<__nv_bfloat16> copy(static_cast<std::size_t>(rows * width));
  launch(tc::grad_output_rows_kernel<float>, {dim3(cuda::grid_for(tc::grad_row_threads(rows))), dim3(cuda::kThreads), 0},
         rows, dim, width, grad_o, o, copy.data(), drow);
  return copy;
}
}  // namespace

GradOutputRowsRun emulated_grad_output_rows(const float* grad_o, const float* o, index_t rows, index_t dim) {
  GradOutputRowsRun run{{}, std::vector<float>(static_cast<std::size_t>(rows))};
  const std::vector<__nv_bfloat16> copy = grad_output_rows(grad_o, o, rows, dim, run.drow.data());
  run.grad_o_bits.resize(copy.size());
  std::memcpy(run.grad_o_bits.data(), copy.data(), copy.size() * sizeof(std::uint16_t));
  return run;
}

index_t key_value_blocks(const Problem& p) {
  return static_cast<index_t>(flash::document_tiles(p.spans, tc::kTileRows).size()) * p.kv_heads;
}
index_t key_value_splits(const Problem& p, index_t resident_blocks) {
  return tc::key_value_splits(key_value_blocks(p), p.heads / p.kv_heads, resident_blocks);
}

AttentionRun run_bf16_attention(const Problem& p, const Inputs& raw, const AttentionRun& initial, const LaunchFaults& faults,
                                const GradientsWanted& wanted, index_t resident_blocks) {
  const flash::Geometry<float> g = geometry(p);
  AttentionRun r = prepared(p, initial);
  // Mirrors tensor_core::forward and backward (attention_mma_launch.cuh).
  const std::vector<flash::WorkTile> work = flash::document_tiles(p.spans, tc::kTileRows, flash::TileOrder::late_queries_first);
  const std::vector<flash::WorkTile> key_work = flash::document_tiles(p.spans, tc::kTileRows, flash::TileOrder::early_keys_first);
  const dim3 block(tc::kBlockThreads);
  const std::size_t cut = faults.shared_shortfall;
  const index_t width = tc::bf16_row_width(p.dim);
  const std::vector<__nv_bfloat16> q = bf16_rows(raw.q, p.dim), k = bf16_rows(raw.k, p.dim), v = bf16_rows(raw.v, p.dim);
  if (!work.empty())
    tc::with_padded_dim(p.dim, [&]<int D>() {
      launch(tc::forward_kernel<D>, {tc_grid(work, p.heads), block, tc::ForwardShared<D>(nullptr).bytes - cut}, g, work.data(),
             width, q.data(), k.data(), v.data(), r.o.data(), r.lse.data());
    });
  const index_t rows = p.batch * p.seq * p.heads;
  std::vector<float> drow(static_cast<std::size_t>(rows));
  const std::vector<__nv_bfloat16> grad_o = grad_output_rows(raw.grad_o.data(), r.o.data(), rows, p.dim, drow.data());
  if (work.empty()) return r;
  tc::with_padded_dim(p.dim, [&]<int D>() {
    if (wanted.k || wanted.v) {
      // The splits and partial sums as backward() makes them; zeroed host vectors for its memsets.
      const index_t splits = key_value_splits(p, resident_blocks), slices = splits - 1;
      const index_t n = p.batch * p.seq * p.kv_heads * p.dim;
      float* grad_k = wanted.k ? r.dk.data() : nullptr;
      float* grad_v = wanted.v ? r.dv.data() : nullptr;
      std::vector<float> partial_k(grad_k && slices > 0 ? static_cast<std::size_t>(slices * n) : 0, 0.0f);
      std::vector<float> partial_v(grad_v && slices > 0 ? static_cast<std::size_t>(slices * n) : 0, 0.0f);
      float* into_k = partial_k.empty() ? nullptr : partial_k.data();
      float* into_v = partial_v.empty() ? nullptr : partial_v.data();
      launch(tc::key_value_grad_kernel<D>,
             {tc_grid(key_work, p.kv_heads * splits), block, tc::KeyValueShared<D>(nullptr).bytes - cut}, g, key_work.data(),
             width, q.data(), k.data(), v.data(), grad_o.data(), r.lse.data(), drow.data(), grad_k, grad_v, into_k, into_v,
             splits, n);
      if (slices > 0) {
        if (cuda::fits_packets<float>(n, {into_k, into_v, grad_k, grad_v})) {
          using V = cuda::Packet<float>;
          const index_t vectors = n / V::kSize;
          launch(tc::sum_splits_kernel<float, V::kSize>, {dim3(cuda::grid_for(vectors)), dim3(cuda::kThreads), 0}, vectors,
                 slices, vectors, reinterpret_cast<const V*>(into_k), reinterpret_cast<V*>(grad_k),
                 reinterpret_cast<const V*>(into_v), reinterpret_cast<V*>(grad_v));
        } else {
          using V = cuda::Vec<float, 1>;
          launch(tc::sum_splits_kernel<float, 1>, {dim3(cuda::grid_for(n)), dim3(cuda::kThreads), 0}, n, slices, n,
                 reinterpret_cast<const V*>(into_k), reinterpret_cast<V*>(grad_k), reinterpret_cast<const V*>(into_v),
                 reinterpret_cast<V*>(grad_v));
        }
      }
    }
    if (wanted.q)
      launch(tc::query_grad_kernel<D>, {tc_grid(work, p.heads), block, tc::QueryShared<D>(nullptr).bytes - cut}, g,
             work.data(), width, q.data(), k.data(), v.data(), grad_o.data(), r.lse.data(), drow.data(), r.dq.data());
  });
  return r;
}

AttentionRun run_fp32_attention(const Problem& p, const Inputs& raw, const AttentionRun& initial,
                                const GradientsWanted& wanted) {
  const flash::Geometry<float> g = geometry(p);
  AttentionRun r = prepared(p, initial);
  const float *q = raw.q.data(), *k = raw.k.data(), *v = raw.v.data(), *grad_o = raw.grad_o.data();
  const index_t rows = p.batch * p.seq * p.heads;
  std::vector<float> drow(static_cast<std::size_t>(rows));
  // Mirrors flash::forward and backward (attention_launch.cuh), shared memory sizes included.
  flash::with_row_layout(p.dim, [&]<int DPT, int TPR>() {
    using L = flash::RowLayout<DPT, TPR>;
    const std::vector<flash::WorkTile> work = flash::document_tiles(p.spans, L::kRowsPerBlock);
    const dim3 block(flash::kBlockThreads);
    if (!work.empty())
      launch(flash::forward_kernel<float, DPT, TPR>, {grid(work, p.heads), block, 2 * flash::kKeyTile * L::kRow * sizeof(float)},
             g, work.data(), q, k, v, r.o.data(), r.lse.data());
    launch(flash::output_dot_kernel<float>, {dim3(cuda::grid_for(rows * 32)), dim3(cuda::kThreads), 0}, rows, p.dim, r.o.data(),
           grad_o, drow.data());
    if (work.empty()) return;
    if (wanted.k || wanted.v)
      launch(flash::key_value_grad_kernel<float, DPT, TPR>,
             {grid(work, p.kv_heads), block, (2 * flash::kQueryChunk * L::kRow + 2 * flash::kQueryChunk) * sizeof(float)}, g,
             work.data(), q, k, v, grad_o, r.lse.data(), drow.data(), wanted.k ? r.dk.data() : nullptr,
             wanted.v ? r.dv.data() : nullptr);
    if (wanted.q)
      launch(flash::query_grad_kernel<float, DPT, TPR>,
             {grid(work, p.heads), block, 2 * flash::kKeyTile * L::kRow * sizeof(float)}, g, work.data(), q, k, v, grad_o,
             r.lse.data(), drow.data(), r.dq.data());
  });
  return r;
}

}  // namespace megacpp::cuda_emulation
