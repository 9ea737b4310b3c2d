// megacpp/backends/cuda/kernels/m2rnn_scan.cuh: M2RNNScan<Cuda>, the M2RNN training recurrence and
// its backward on the GPU (contract: megacpp/core/kernels/m2rnn_scan.hpp; kernels:
// detail/m2rnn_scan.cuh, one block per (row, head), tokens in order, threads over the state's
// elements; launches: detail/m2rnn_scan_launch.cuh). Included by megacpp/backends/cuda.cuh after
// `Cuda` is defined; including this header alone includes cuda.cuh first.
#pragma once

#include "megacpp/backends/cuda.cuh"

#define MEGACPP_CUDA_BACKEND_INTERNAL
#include "megacpp/backends/cuda/detail/m2rnn_scan_launch.cuh"
#undef MEGACPP_CUDA_BACKEND_INTERNAL

#include "megacpp/core/kernels/m2rnn_scan.hpp"

namespace megacpp::kernels {

/// The CUDA M2RNN recurrence: the operands, checkpoints and gradients stay on the device.
template <>
struct M2RNNScan<Cuda> {
  static constexpr bool available = true;  ///< implemented
  /// y and, when checkpoints is not null, the state entering every chunk.
  template <class T>
  static void forward(const M2RNNScanParams& p, const DocumentLayout<Cuda>& docs, const M2RNNScanOperands<T>& in, T* y,
                      T* checkpoints) {
    cuda::m2rnn::scan_forward<T>(p, docs, in, y, checkpoints);
  }
  /// Adds into every gradient that is not null, from dy and the forward's checkpoints.
  template <class T>
  static void backward(const M2RNNScanParams& p, const DocumentLayout<Cuda>& docs, const M2RNNScanOperands<T>& in,
                       const T* dy, const T* checkpoints, const M2RNNScanGradients<T>& grads) {
    cuda::m2rnn::scan_backward<T>(p, docs, in, dy, checkpoints, grads);
  }
};

}  // namespace megacpp::kernels
