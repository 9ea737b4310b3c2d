// megacpp/backends/cuda/kernels/ssm_scan.cuh: SsmScan<Cuda>, the SSM scan of Mamba-3 and Mamba-2
// as the literal recurrence inside each chunk, parallel over (row, head, chunk) blocks with the
// state and its gradient carried across chunks by one short pass each (detail/ssm/scan.cuh,
// scan_chunks.cuh, scan_forward.cuh, scan_backward.cuh; launched by scan_launch.cuh). Included by
// megacpp/backends/cuda.cuh after `Cuda` is defined.
#pragma once

#include "megacpp/backends/cuda.cuh"

#define MEGACPP_CUDA_BACKEND_INTERNAL
#include "megacpp/backends/cuda/detail/ssm/scan_launch.cuh"
#undef MEGACPP_CUDA_BACKEND_INTERNAL

namespace megacpp::kernels {

/// The CUDA SSM scan: the recurrence token by token per (row, head, chunk) block, the chunk plan and the
/// saved states of the contract (the states entering each chunk, as SsmScan<Cpu> saves them).
/// The chunk plan is made on the host from docs.doc_ids_host.
template <>
struct SsmScan<Cuda> {
  static constexpr bool available = true;  ///< implemented
  /// y and the states entering each chunk (chunk_states may be null when no backward follows).
  template <class T>
  static void forward(const ScanParams& p, const DocumentLayout<Cuda>& docs, const ScanOperands<T>& in, T* y,
                      T* chunk_states) {
    cuda::ssm::scan_forward<T>(p, docs, in, y, chunk_states);
  }
  /// Adds into every gradient that is not null (q, k per head).
  template <class T>
  static void backward(const ScanParams& p, const DocumentLayout<Cuda>& docs, const ScanOperands<T>& in, const T* dy,
                       const T* chunk_states, const ScanGradients<T>& grads) {
    cuda::ssm::scan_backward<T>(p, docs, in, dy, chunk_states, grads);
  }
};

}  // namespace megacpp::kernels
