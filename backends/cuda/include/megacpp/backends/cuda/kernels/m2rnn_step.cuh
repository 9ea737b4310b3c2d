// megacpp/backends/cuda/kernels/m2rnn_step.cuh: M2RNNStep<Cuda>, one decode step of the M2RNN
// recurrence on the GPU (contract: megacpp/core/kernels/m2rnn_step.hpp; kernel:
// detail/m2rnn_step.cuh, one block per (row, head), threads over the state's columns). Included by
// megacpp/backends/cuda.cuh after `Cuda` is defined; including this header alone includes cuda.cuh
// first.
#pragma once

#include "megacpp/backends/cuda.cuh"

#define MEGACPP_CUDA_BACKEND_INTERNAL
#include "megacpp/backends/cuda/detail/m2rnn_step.cuh"
#undef MEGACPP_CUDA_BACKEND_INTERNAL

#include "megacpp/core/kernels/m2rnn_step.hpp"

namespace megacpp::kernels {

/// The CUDA M2RNN decode step: the state stays on the device, one launch per layer and token.
template <>
struct M2RNNStep<Cuda> {
  static constexpr bool available = true;  ///< implemented
  /// Advances every row's state by one token; writes y.
  template <class T>
  static void step(const M2RNNStepParams& p, const M2RNNStepArgs<T>& a) {
    const std::size_t shared = cuda::m2rnn::step_shared_bytes<T>(p);
    check(shared <= 48 * 1024, "M2RNNStep<Cuda>", "v_dim ", p.v_dim, " needs ", shared,
          " bytes of shared memory per block, more than the 48 KiB a launch gets without opting in");
    cuda::m2rnn::m2rnn_step_kernel<T>
        <<<cuda::grid_per_item(p.batch * p.heads), cuda::m2rnn::kM2RNNStepThreads, shared, cuda::kStream>>>(p, a);
    MEGACPP_CUDA_CHECK_LAUNCH(m2rnn_step_kernel);
  }
};

}  // namespace megacpp::kernels
