// tests/cuda_emulation/conv1d_emulated.hpp: Mamba-2's document-aware causal conv1d on CUDA
// (CausalConv1d<Cuda>: detail/ssm/conv1d.cuh) run on the emulator, with host pointers as device
// memory.
#pragma once

#include <cstdint>

#include "megacpp/core/kernels/causal_conv1d.hpp"

namespace megacpp::cuda_emulation {

/// cuda::causal_conv1d_forward (detail/ssm/conv1d_launch.cuh), launched as it launches; doc_ids
/// (batch, seq).
template <class T>
void emulated_conv1d_forward(const kernels::Conv1dParams& p, const std::int32_t* doc_ids,
                             const kernels::Conv1dArgs<T>& a);

/// cuda::causal_conv1d_backward: adds into g.x, g.weight, g.bias (each may be null).
template <class T>
void emulated_conv1d_backward(const kernels::Conv1dParams& p, const std::int32_t* doc_ids,
                              const kernels::Conv1dArgs<T>& a, const kernels::Conv1dGrads<T>& g);

}  // namespace megacpp::cuda_emulation
