// tests/cuda_emulation/scan_emulated.cpp: the launches of detail/ssm/scan_launch.cuh
// (scan_forward, scan_backward) on the emulator. Those functions launch with <<<>>>, which a host
// compiler does not take, so this file includes the kernel headers alone (they hold no launch)
// and mirrors the launch functions call for call: the same kernels, grid and
// block sizes and scratch sizes, and the chunk table from the backend's own host helpers
// (check_scan_sizes, plan_scan: what device_chunks uploads and keeps with the layout). Host vectors
// stand in for device memory; the scratch the launch code allocates is filled with NaN, as
// cudaMalloc leaves it uninitialized (a kernel reading what no kernel wrote shows in the outputs).
#include "scan_emulated.hpp"

#include <limits>

#include "emulator/launch.hpp"
#include "host_arrays.hpp"
#include "launch_configs.hpp"

#define MEGACPP_CUDA_BACKEND_INTERNAL  // as kernels/ssm_scan.cuh does around its detail headers
#include "megacpp/backends/cuda/detail/ssm/scan_backward.cuh"
#include "megacpp/backends/cuda/detail/ssm/scan_forward.cuh"
#undef MEGACPP_CUDA_BACKEND_INTERNAL

namespace megacpp::cuda_emulation {
namespace {

namespace ssm = megacpp::cuda::ssm;
using kernels::ScanChunk;
using kernels::ScanParams;

LaunchConfig blocks_of(index_t blocks) { return {dim3(static_cast<unsigned>(blocks)), dim3(cuda::kThreads), 0}; }

// Mirrors ssm::scan_forward (scan_launch.cuh): y, and the states entering each chunk into chunk_states.
void forward(const ScanParams& sh, const std::vector<ScanChunk>& chunks, const kernels::ScanOperands<float>& in,
             float* y, float* chunk_states) {
  const ssm::ScanView<float> s{sh, in, chunks.data()};
  const index_t items = s.chunk_items(), NP = s.state_size();
  std::vector<float> decay = uninitialized_device<float>(items);
  launch(ssm::scan_forward_local_kernel<float>, block_per_item_launch(items), s, chunk_states, decay.data());
  launch(ssm::scan_forward_carry_kernel<float>, grid_stride_launch(sh.batch * sh.heads * NP), s, chunk_states, decay.data());
  const index_t blocks = ssm::forward_chunk_blocks(items);
  std::vector<float> scratch = uninitialized_device<float>(blocks * NP);
  launch(ssm::scan_forward_kernel<float>, blocks_of(blocks), s, chunk_states, y, scratch.data());
}

// Mirrors ssm::scan_backward (scan_launch.cuh): adds into every gradient of `grads` that is not
// null, dD only when the scan has a D.
void backward(const ScanParams& sh, const std::vector<ScanChunk>& chunks, const kernels::ScanOperands<float>& in,
              const float* dy, const float* chunk_states, const kernels::ScanGradients<float>& asked) {
  kernels::ScanGradients<float> grads = asked;
  if (!in.D) grads.D = nullptr;
  const ssm::ScanView<float> s{sh, in, chunks.data()};
  const index_t items = s.chunk_items(), NP = s.state_size();
  std::vector<float> flows = uninitialized_device<float>(items * NP), decay = uninitialized_device<float>(items);
  launch(ssm::scan_backward_local_kernel<float>, block_per_item_launch(items), s, dy, flows.data(), decay.data());
  launch(ssm::scan_backward_carry_kernel<float>, grid_stride_launch(sh.batch * sh.heads * NP), s, flows.data(), decay.data());
  const index_t blocks = ssm::backward_chunk_blocks(items);
  const index_t chunk_rows = ssm::backward_chunk_rows(sh);
  std::vector<float> scratch = uninitialized_device<float>(blocks * (chunk_rows + 2) * NP);
  std::vector<float> dD_parts = uninitialized_device<float>(grads.D ? items : 0);
  const ssm::ScanBackwardArgs<float> a{dy, chunk_states, grads, flows.data(), dD_parts.data()};
  launch(ssm::scan_backward_kernel<float>, blocks_of(blocks), s, a, scratch.data(), chunk_rows);
  if (grads.D)
    launch(ssm::scan_dD_kernel<float>, grid_stride_launch(sh.heads), sh.batch, sh.heads, sh.max_chunks, dD_parts.data(), grads.D);
}

}  // namespace

ScanRun run_emulated_scan(const ScanProblem& p, const ScanRun& initial) {
  const ScanParams& sh = p.sizes;
  ScanRun r = initial;
  // Every y is written by its chunk's block; NaN shows one that is not.
  r.y.assign(static_cast<std::size_t>(sh.batch * sh.seq * sh.heads * sh.rank * sh.head_dim),
             std::numeric_limits<float>::quiet_NaN());
  // The caller's chunk states: SsmScan<Cuda>'s caller allocates them, uninitialized.
  r.chunk_states = uninitialized_device<float>(sh.batch * sh.heads * sh.max_chunks * sh.d_state * sh.head_dim);
  // What both launch functions check and plan before their first launch.
  ssm::check_scan_sizes("SsmScan<Cuda>::forward", sh, p.doc_ids);
  if (sh.batch * sh.heads == 0 || sh.seq == 0) return r;
  const std::vector<ScanChunk> chunks = ssm::plan_scan("SsmScan<Cuda>::forward", sh, p.doc_ids);
  const kernels::ScanOperands<float> in = scan_operands(p);
  forward(sh, chunks, in, r.y.data(), r.chunk_states.data());
  backward(sh, chunks, in, p.dy.data(), r.chunk_states.data(), scan_gradients(r));
  return r;
}

}  // namespace megacpp::cuda_emulation
