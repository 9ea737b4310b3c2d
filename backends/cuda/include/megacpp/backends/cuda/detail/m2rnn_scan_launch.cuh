// CUDA backend: the M2RNN training recurrence's host side, the launches of its forward and backward
// (the kernels and their design: m2rnn_scan.cuh). Apart from the kernels, as the SSM scan's are
// (ssm/scan_launch.cuh), so that the CUDA emulation (tests/cuda_emulation/m2rnn_emulated.cpp)
// compiles the kernels with a host compiler and launches them as this file does.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cstddef>

#include "megacpp/backends/cuda/detail/check.cuh"
#include "megacpp/backends/cuda/detail/m2rnn_scan.cuh"
#include "megacpp/backends/cuda/detail/memory.cuh"

namespace megacpp::cuda::m2rnn {

// Throws unless the sizes are valid and the layout's rows and tokens are the problem's.
template <class B>
void check_scan(const char* op, const kernels::M2RNNScanParams& p, const DocumentLayout<B>& docs) {
  p.validate(op);
  check(docs.batch == p.batch && docs.seq == p.seq, op, "document layout (", docs.batch, ", ", docs.seq,
        ") does not match (batch, seq) = (", p.batch, ", ", p.seq, ")");
}

// One block per (row, head); its scratch in shared memory when it fits, else a global slice.
template <class T>
std::size_t shared_bytes(const ScanScratch& s) {
  return s.in_shared<T>() ? s.bytes<T>() : 0;
}
template <class T>
std::size_t global_scratch_elements(const ScanScratch& s, unsigned blocks) {
  return s.in_shared<T>() ? 0 : static_cast<std::size_t>(blocks) * static_cast<std::size_t>(s.size);
}

template <class T, class B>
void scan_forward(const kernels::M2RNNScanParams& p, const DocumentLayout<B>& docs,
                  const kernels::M2RNNScanOperands<T>& in, T* y, T* checkpoints) {
  check_scan("M2RNNScan<Cuda>::forward", p, docs);
  const ScanScratch s = ScanScratch::forward(p);
  const unsigned blocks = grid_per_item(p.batch * p.heads);
  const DeviceBuffer<T> scratch(global_scratch_elements<T>(s, blocks));
  scan_forward_kernel<T><<<blocks, kScanThreads, shared_bytes<T>(s), kStream>>>(p, s, docs.doc_ids.data(), in, y,
                                                                                checkpoints, s.in_shared<T>() ? nullptr : scratch.get());
  MEGACPP_CUDA_CHECK_LAUNCH(m2rnn::scan_forward_kernel);
}

template <class T, class B>
void scan_backward(const kernels::M2RNNScanParams& p, const DocumentLayout<B>& docs,
                   const kernels::M2RNNScanOperands<T>& in, const T* dy, const T* checkpoints,
                   const kernels::M2RNNScanGradients<T>& grads) {
  check_scan("M2RNNScan<Cuda>::backward", p, docs);
  const ScanScratch s = ScanScratch::backward(p);
  const index_t items = p.batch * p.heads, VV = p.v_dim * p.v_dim;
  const unsigned blocks = grid_per_item(items);
  const DeviceBuffer<T> scratch(global_scratch_elements<T>(s, blocks));
  const DeviceBuffer<T> chunk_states(static_cast<std::size_t>(blocks) * static_cast<std::size_t>(s.chunk_states));
  const DeviceBuffer<T> dW_items(grads.W ? static_cast<std::size_t>(items * VV) : 0);
  scan_backward_kernel<T><<<blocks, kScanThreads, shared_bytes<T>(s), kStream>>>(
      p, s, docs.doc_ids.data(), in, dy, checkpoints, grads, grads.W ? dW_items.get() : nullptr, chunk_states.get(),
      s.in_shared<T>() ? nullptr : scratch.get());
  MEGACPP_CUDA_CHECK_LAUNCH(m2rnn::scan_backward_kernel);
  if (!grads.W) return;
  sum_rows_kernel<T><<<grid_for(p.heads * VV), kThreads, 0, kStream>>>(p.batch, p.heads, VV, dW_items.get(), grads.W);
  MEGACPP_CUDA_CHECK_LAUNCH(m2rnn::sum_rows_kernel);
}

}  // namespace megacpp::cuda::m2rnn
