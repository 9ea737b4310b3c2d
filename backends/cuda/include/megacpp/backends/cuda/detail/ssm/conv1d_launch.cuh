// CUDA backend: the launches of Mamba-2's document-aware causal conv1d (equations and design:
// conv1d.cuh). Apart from the kernels, as the SSM scan's are (scan_launch.cuh), so that the CUDA
// emulation (tests/cuda_emulation/conv1d_emulated.cpp) compiles the kernels with a host compiler and
// launches them as this file does.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cstdint>

#include "megacpp/backends/cuda/detail/check.cuh"
#include "megacpp/backends/cuda/detail/ssm/conv1d.cuh"
#include "megacpp/backends/cuda/detail/token_runs_launch.cuh"

namespace megacpp::cuda {

// y from x, weight, bias (null: no bias); doc_ids (batch, seq) on the device.
template <class T>
void causal_conv1d_forward(const kernels::Conv1dParams& p, const std::int32_t* doc_ids, const kernels::Conv1dArgs<T>& a) {
  const index_t n = p.batch * p.seq * p.channels;
  if (n == 0) return;
  conv1d_forward_kernel<T><<<grid_for(n), kThreads, 0, kStream>>>(p, doc_ids, a);
  MEGACPP_CUDA_CHECK_LAUNCH(conv1d_forward_kernel);
}

// Adds into g.x, g.weight, g.bias, each skipped when null.
template <class T>
void causal_conv1d_backward(const kernels::Conv1dParams& p, const std::int32_t* doc_ids, const kernels::Conv1dArgs<T>& a,
                            const kernels::Conv1dGrads<T>& g) {
  const index_t tokens = p.batch * p.seq, n = tokens * p.channels;
  if (n == 0) return;
  if (g.x) {
    conv1d_input_grad_kernel<T><<<grid_for(n), kThreads, 0, kStream>>>(p, doc_ids, a.weight, g.dy, g.x);
    MEGACPP_CUDA_CHECK_LAUNCH(conv1d_input_grad_kernel);
  }
  if (g.weight)
    add_token_sums<T>(tokens, p.width * p.channels, Conv1dWeightGradTerm<T>{p, doc_ids, a.x, g.dy},
                      Conv1dWeightAt<T>{g.weight, p.channels, p.width});
  if (g.bias) add_token_sums<T>(tokens, p.channels, Conv1dBiasGradTerm<T>{p.channels, g.dy}, ColumnsAt<T>{g.bias});
}

}  // namespace megacpp::cuda
