// tests/cuda_emulation/indexing_emulated.hpp: the CUDA backend's index-driven kernels (gathers, the
// embedding's scatter-add, RoPE, cross-entropy, the LM head's fused softcap + cross-entropy rows:
// detail/indexing.cuh) and the MoE gated combine (detail/gated_combine.cuh) run on the emulator,
// with host pointers as device memory. Each mirrors the function of the same name in
// detail/indexing_launch.cuh or detail/gated_combine_launch.cuh, launched as it launches, and is
// spelled as the CPU backend's call (Cpu::gather_rows, SoftcapCrossEntropy<Cpu>::forward,
// GatedCombine<Cpu>::forward, ...), so a test runs the same code on both. Instantiated for float
// and double (indexing_emulated.cpp).
#pragma once

#include <cstdint>

#include "megacpp/core/config.hpp"
#include "megacpp/core/kernels/gated_combine.hpp"
#include "megacpp/core/kernels/cross_entropy.hpp"

namespace megacpp::cuda_emulation {

/// Cuda::gather_rows, scatter_add_rows, rope, cross_entropy and cross_entropy_backward.
struct EmulatedIndexing {
  template <class T>
  static void gather_rows(index_t n, index_t dim, const T* table, const std::int32_t* idx, T* out);
  template <class T>
  static void scatter_add_rows(index_t n, index_t dim, const T* gout, const std::int32_t* idx, T* gtable);
  template <class T>
  static void rope(index_t tokens, index_t heads, index_t dim, const std::int32_t* positions, const T* inv_freq, int sign,
                   const T* x, T beta, T* y);
  template <class T>
  static void cross_entropy(index_t rows, index_t vocab, const T* logits, const std::int32_t* targets, const T* mask,
                            T* losses, T* lse);
  template <class T>
  static void cross_entropy_backward(index_t rows, index_t vocab, const T* logits, const T* lse,
                                     const std::int32_t* targets, const T* mask, T scale, T* glogits);
};

/// SoftcapCrossEntropy<Cuda>.
struct EmulatedSoftcapCrossEntropy {
  template <class T>
  static void forward(const kernels::SoftcapCrossEntropyParams& p, const kernels::SoftcapCrossEntropyArgs<T>& a);
};

/// GatedCombine<Cuda>.
struct EmulatedGatedCombine {
  template <class T>
  static void forward(const kernels::GatedCombineParams& p, const kernels::GatedCombineArgs<T>& a);
  template <class T>
  static void backward(const kernels::GatedCombineParams& p, const kernels::GatedCombineArgs<T>& a,
                       const kernels::GatedCombineGrads<T>& g);
};

}  // namespace megacpp::cuda_emulation
