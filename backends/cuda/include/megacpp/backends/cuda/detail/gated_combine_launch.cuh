// CUDA backend: the launches of the MoE gated combine's kernels (detail/gated_combine.cuh), a
// block of kThreads per token. Apart from the kernels so that the host emulation of the CUDA
// execution model (tests/cuda_emulation) compiles those unchanged.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include "megacpp/backends/cuda/detail/check.cuh"
#include "megacpp/backends/cuda/detail/gated_combine.cuh"
#include "megacpp/core/kernels/gated_combine.hpp"

namespace megacpp::cuda {

template <class T>
void gated_combine_forward(const kernels::GatedCombineParams& p, const kernels::GatedCombineArgs<T>& a) {
  if (p.tokens == 0) return;
  gated_combine_forward_kernel<T><<<grid_per_item(p.tokens), kThreads, 0, kStream>>>(p.tokens, p.k, p.d, a.row_of_slot,
                                                                                     a.gate, a.ys, a.y);
  MEGACPP_CUDA_CHECK_LAUNCH(gated_combine_forward_kernel);
}

template <class T>
void gated_combine_backward(const kernels::GatedCombineParams& p, const kernels::GatedCombineArgs<T>& a,
                            const kernels::GatedCombineGrads<T>& g) {
  if (p.tokens == 0 || (!g.dys && !g.dgate)) return;
  gated_combine_backward_kernel<T><<<grid_per_item(p.tokens), kThreads, 0, kStream>>>(
      p.tokens, p.k, p.d, a.row_of_slot, a.gate, a.ys, g.dy, g.dys, g.dgate);
  MEGACPP_CUDA_CHECK_LAUNCH(gated_combine_backward_kernel);
}

}  // namespace megacpp::cuda
