// megacpp/backends/cuda/kernels/causal_conv1d.cuh: CausalConv1d<Cuda>, Mamba-2's document-aware
// causal conv1d on the GPU (contract: megacpp/core/kernels/causal_conv1d.hpp; kernels:
// detail/ssm/conv1d.cuh: one thread per output element summing in the CPU kernel's order, dw and
// dbias summed over runs of tokens).
// Included by megacpp/backends/cuda.cuh after `Cuda` is defined; including this header alone
// includes cuda.cuh first.
#pragma once

#include "megacpp/backends/cuda.cuh"

#define MEGACPP_CUDA_BACKEND_INTERNAL
#include "megacpp/backends/cuda/detail/ssm/conv1d_launch.cuh"
#undef MEGACPP_CUDA_BACKEND_INTERNAL

#include "megacpp/core/kernels/causal_conv1d.hpp"
#include "megacpp/core/kernels/documents.hpp"

namespace megacpp::kernels {

/// The CUDA document-aware causal conv1d. Compiled by the CUDA build, run against CausalConv1d<Cpu>
/// on the CUDA emulation (tests/cuda_emulation/test_conv1d.cpp) and on a GPU by the CUDA test.
template <>
struct CausalConv1d<Cuda> {
  static constexpr bool available = true;  ///< implemented
  /// y from x, weight, bias; no tap crosses a document.
  template <class T>
  static void forward(const Conv1dParams& p, const DocumentLayout<Cuda>& docs, const Conv1dArgs<T>& a) {
    cuda::causal_conv1d_forward<T>(p, docs.doc_ids.data(), a);
  }
  /// Adds dx, dweight, dbias (each may be null).
  template <class T>
  static void backward(const Conv1dParams& p, const DocumentLayout<Cuda>& docs, const Conv1dArgs<T>& a,
                       const Conv1dGrads<T>& g) {
    cuda::causal_conv1d_backward<T>(p, docs.doc_ids.data(), a, g);
  }
};

}  // namespace megacpp::kernels
