// megacpp/backends/cuda/kernels/ssm_step.cuh: SsmStep<Cuda>, one decode step of Mamba-3's
// recurrence on the GPU (contract: megacpp/core/kernels/ssm_step.hpp; kernel: detail/ssm/step.cuh,
// one block per (row, head), threads over the state's columns). Included by
// megacpp/backends/cuda.cuh after `Cuda` is defined; including this header alone includes cuda.cuh
// first.
#pragma once

#include "megacpp/backends/cuda.cuh"

#define MEGACPP_CUDA_BACKEND_INTERNAL
#include "megacpp/backends/cuda/detail/ssm/step.cuh"
#undef MEGACPP_CUDA_BACKEND_INTERNAL

#include "megacpp/core/kernels/ssm_step.hpp"

namespace megacpp::kernels {

/// The CUDA Mamba-3 decode step: the caches stay on the device, one launch per layer and token.
template <>
struct SsmStep<Cuda> {
  static constexpr bool available = true;  ///< implemented
  /// Advances every row's angles, state and previous-token buffers by one token; writes y.
  template <class T>
  static void step(const SsmStepParams& p, const SsmStepArgs<T>& a) {
    const std::size_t shared = cuda::ssm::step_shared_bytes<T>(p);
    check(shared <= 48 * 1024, "SsmStep<Cuda>", "rank ", p.rank, " x d_state ", p.d_state, " needs ", shared,
          " bytes of shared memory per block, more than the 48 KiB a launch gets without opting in");
    cuda::ssm::ssm_step_kernel<T><<<cuda::grid_per_item(p.batch * p.heads), cuda::ssm::kStepThreads, shared, cuda::kStream>>>(p, a);
    MEGACPP_CUDA_CHECK_LAUNCH(ssm_step_kernel);
  }
};

}  // namespace megacpp::kernels
