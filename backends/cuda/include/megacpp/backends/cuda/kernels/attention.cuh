// megacpp/backends/cuda/kernels/attention.cuh: FusedAttention<Cuda>, FlashAttention-2 over
// document spans: fp32 on the CUDA cores (detail/attention.cuh, detail/attention_launch.cuh), or,
// for float with bf16 products (a CudaBf16Attention scope's choice, else the op's: a Bf16Mixed
// model asks), bf16 on the tensor cores (detail/attention_mma.cuh, detail/attention_mma_launch.cuh;
// tensor_core::selected). Included by megacpp/backends/cuda.cuh after `Cuda` is defined.
#pragma once

#include "megacpp/backends/cuda.cuh"

#define MEGACPP_CUDA_BACKEND_INTERNAL
#include "megacpp/backends/cuda/detail/attention_launch.cuh"
#include "megacpp/backends/cuda/detail/attention_mma_launch.cuh"
#undef MEGACPP_CUDA_BACKEND_INTERNAL

namespace megacpp::kernels {

/// The CUDA fused attention: one block per (document tile, head), masked tiles never visited,
/// the backward in two passes (dK/dV by key tile, dQ by query tile) so no gradient row has two
/// writers. Tile hints are not used: the tile sizes follow head_dim (detail/attention.cuh) or are
/// the tensor-core kernels' 64 x 64 (detail/attention_mma.cuh).
template <>
struct FusedAttention<Cuda> {
  static constexpr bool available = true;  ///< implemented
  /// Writes o and lse (padding tokens: 0 and -inf).
  template <class T>
  static AttentionStats forward(const AttentionParams& p, const DocumentLayout<Cuda>& docs,
                                const AttentionForwardArgs<T>& args) {
    if constexpr (std::is_same_v<T, float>)
      if (cuda::flash::tensor_core::selected<T>(p)) return cuda::flash::tensor_core::forward(p, docs, args);
    return cuda::flash::forward<T>(p, docs, args);
  }
  /// Adds dq, dk, dv (each may be null).
  template <class T>
  static AttentionStats backward(const AttentionParams& p, const DocumentLayout<Cuda>& docs,
                                 const AttentionBackwardArgs<T>& args) {
    if constexpr (std::is_same_v<T, float>)
      if (cuda::flash::tensor_core::selected<T>(p)) return cuda::flash::tensor_core::backward(p, docs, args);
    return cuda::flash::backward<T>(p, docs, args);
  }
};

}  // namespace megacpp::kernels
