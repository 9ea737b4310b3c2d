// CUDA backend: the SSM scan's host side, the launches of its forward and backward passes
// (equations and design: scan.cuh; the kernels: scan_chunks.cuh, scan_forward.cuh,
// scan_backward.cuh). Apart from the kernels, as the attention's launches are
// (attention_launch.cuh): the kernel headers hold no `<<<>>>`, so the CUDA emulation
// (tests/cuda_emulation) compiles them unmodified with a host compiler and launches them as this
// file does.
#pragma once

#include "megacpp/backends/cuda/detail/guard.cuh"

#include "megacpp/backends/cuda/detail/ssm/scan.cuh"
#include "megacpp/backends/cuda/detail/ssm/scan_backward.cuh"
#include "megacpp/backends/cuda/detail/ssm/scan_chunks.cuh"
#include "megacpp/backends/cuda/detail/ssm/scan_forward.cuh"

namespace megacpp::cuda::ssm {

// y (batch, seq, heads, R, P) and, when chunk_states is not null, the state entering each chunk
// (batch, heads, max_chunks, N, P); a document's first chunk gets zeros (no state comes in).
template <class T, class B>
void scan_forward(const ScanParams& sh, const DocumentLayout<B>& docs, const kernels::ScanOperands<T>& in, T* y,
                  T* chunk_states) {
  const char* op = "SsmScan<Cuda>::forward";
  check_scan_sizes(op, sh, docs.doc_ids_host);
  if (sh.batch * sh.heads == 0 || sh.seq == 0) return;
  const DeviceChunks& chunks = device_chunks(op, sh, docs);
  const ScanView<T> s{sh, in, chunks.device.get()};
  const index_t items = s.chunk_items(), NP = s.state_size();
  const DeviceBuffer<T> own_states(chunk_states ? 0 : static_cast<std::size_t>(items * NP));
  T* states = chunk_states ? chunk_states : own_states.get();
  const DeviceBuffer<T> decay(static_cast<std::size_t>(items));
  scan_forward_local_kernel<T><<<grid_per_item(items), kThreads, 0, kStream>>>(s, states, decay.get());
  MEGACPP_CUDA_CHECK_LAUNCH(scan_forward_local_kernel);
  scan_forward_carry_kernel<T><<<grid_for(sh.batch * sh.heads * NP), kThreads, 0, kStream>>>(s, states, decay.get());
  MEGACPP_CUDA_CHECK_LAUNCH(scan_forward_carry_kernel);
  const index_t blocks = forward_chunk_blocks(items);
  const DeviceBuffer<T> scratch(static_cast<std::size_t>(blocks * NP));
  scan_forward_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, kStream>>>(s, states, y, scratch.get());
  MEGACPP_CUDA_CHECK_LAUNCH(scan_forward_kernel);
}

// Adds into every gradient of `grads` that is not null (dq, dk per head), given dy and the states
// the forward saved; dD only when the scan has a D (the contract: no skip connection, no dD).
template <class T, class B>
void scan_backward(const ScanParams& sh, const DocumentLayout<B>& docs, const kernels::ScanOperands<T>& in, const T* dy,
                   const T* chunk_states, const kernels::ScanGradients<T>& asked) {
  kernels::ScanGradients<T> grads = asked;
  if (!in.D) grads.D = nullptr;
  const char* op = "SsmScan<Cuda>::backward";
  check_scan_sizes(op, sh, docs.doc_ids_host);
  if (sh.batch * sh.heads == 0 || sh.seq == 0) return;
  if (!grads.q && !grads.k && !grads.v && !grads.log_alpha && !grads.gamma && !grads.shift && !grads.D) return;
  check(chunk_states != nullptr, op, "needs the chunk states the forward saved (forward with chunk_states set)");
  const DeviceChunks& chunks = device_chunks(op, sh, docs);
  const ScanView<T> s{sh, in, chunks.device.get()};
  const index_t items = s.chunk_items(), NP = s.state_size();
  const DeviceBuffer<T> flows(static_cast<std::size_t>(items * NP));
  const DeviceBuffer<T> decay(static_cast<std::size_t>(items));
  scan_backward_local_kernel<T><<<grid_per_item(items), kThreads, 0, kStream>>>(s, dy, flows.get(), decay.get());
  MEGACPP_CUDA_CHECK_LAUNCH(scan_backward_local_kernel);
  scan_backward_carry_kernel<T><<<grid_for(sh.batch * sh.heads * NP), kThreads, 0, kStream>>>(s, flows.get(), decay.get());
  MEGACPP_CUDA_CHECK_LAUNCH(scan_backward_carry_kernel);
  const index_t blocks = backward_chunk_blocks(items);
  const index_t chunk_rows = backward_chunk_rows(sh);
  const DeviceBuffer<T> scratch(static_cast<std::size_t>(blocks * (chunk_rows + 2) * NP));
  const DeviceBuffer<T> dD_parts(grads.D ? static_cast<std::size_t>(items) : 0);
  const ScanBackwardArgs<T> a{dy, chunk_states, grads, flows.get(), dD_parts.get()};
  scan_backward_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, kStream>>>(s, a, scratch.get(), chunk_rows);
  MEGACPP_CUDA_CHECK_LAUNCH(scan_backward_kernel);
  if (grads.D) {
    scan_dD_kernel<T><<<grid_for(sh.heads), kThreads, 0, kStream>>>(sh.batch, sh.heads, sh.max_chunks, dD_parts.get(),
                                                                      grads.D);
    MEGACPP_CUDA_CHECK_LAUNCH(scan_dD_kernel);
  }
}

}  // namespace megacpp::cuda::ssm
