// megacpp/backends/cuda/kernels/ssm_rotary.cuh: SsmRotary<Cuda>, Mamba-3's data-dependent rotary
// angles and the rotation of B and C on the GPU (contract: megacpp/core/kernels/ssm_rotary.hpp;
// kernels: detail/ssm/rotary.cuh, theta a scan over runs of each row's tokens per (b, h, angle),
// one thread per output element elsewhere). Included by megacpp/backends/cuda.cuh after `Cuda` is defined;
// including this header alone includes cuda.cuh first.
#pragma once

#include "megacpp/backends/cuda.cuh"

#define MEGACPP_CUDA_BACKEND_INTERNAL
#include "megacpp/backends/cuda/detail/ssm/rotary_launch.cuh"
#undef MEGACPP_CUDA_BACKEND_INTERNAL

#include "megacpp/core/kernels/documents.hpp"
#include "megacpp/core/kernels/ssm_rotary.hpp"

namespace megacpp::kernels {

/// Mamba-3's rotary kernels on CUDA. Compiled by the CUDA build, run against SsmRotary<Cpu> on the
/// CUDA emulation (tests/cuda_emulation/test_rotary.cpp) and on a GPU by the CUDA test.
template <>
struct SsmRotary<Cuda> {
  static constexpr bool available = true;  ///< implemented
  /// cossin from angle and dt, theta restarting at every document.
  template <class T>
  static void angles_forward(const RotaryAnglesParams& p, const DocumentLayout<Cuda>& docs,
                             const RotaryAnglesArgs<T>& a) {
    cuda::rotary_angles_forward<T>(p, docs.doc_ids.data(), a);
  }
  /// Adds dangle and ddt (either may be null).
  template <class T>
  static void angles_backward(const RotaryAnglesParams& p, const DocumentLayout<Cuda>& docs,
                              const RotaryAnglesArgs<T>& a, const RotaryAnglesGrads<T>& g) {
    cuda::rotary_angles_backward<T>(p, docs.doc_ids.data(), a, g);
  }
  /// y = rotate(x + bias_h, cossin).
  template <class T>
  static void qk_forward(const RotaryQKParams& p, const RotaryQKArgs<T>& a) {
    cuda::rotary_qk_forward<T>(p, a);
  }
  /// Adds dx, dbias, dcossin (each may be null).
  template <class T>
  static void qk_backward(const RotaryQKParams& p, const RotaryQKArgs<T>& a, const RotaryQKGrads<T>& g) {
    cuda::rotary_qk_backward<T>(p, a, g);
  }
};

}  // namespace megacpp::kernels
