// megacpp/nn/mamba/kernels.hpp: how the Mamba layers reach their backend's fused kernels.
//
// The scan, the rotary angles and the doc-aware conv1d are not part of the core `Backend`
// concept (megacpp/core/backend.hpp): they are an extension a backend opts into by providing, in
// namespace megacpp, overloads of free functions taking the backend tag first:
//
//   constexpr bool ssm_kernels_available(YourBackend);            // the opt-in flag
//   void ssm_chunked_scan_forward(YourBackend, ...);              // and the rest: see
//   void ssm_chunked_scan_backward(YourBackend, ...);             // megacpp/backends/cpu/ssm_scan.hpp,
//   void ssm_rotary_angles_forward / _backward(YourBackend, ...); // ssm_rotary.hpp and conv1d.hpp
//   void ssm_rotary_qk_forward / _backward(YourBackend, ...);     // for the exact signatures
//   void ssm_causal_conv1d_forward / _backward(YourBackend, ...);
//
// Layer code calls them unqualified with `B{}` so argument-dependent lookup picks the backend's
// overload; a backend without them fails at compile time with the message below rather than with
// a page of overload candidates. The CPU kernels come with <megacpp/nn/mamba.hpp>.
#pragma once

#include <concepts>

#include "megacpp/core/backend.hpp"

namespace megacpp {

/// A backend that implements the ssm_* kernel extension (see the header comment).
template <class B>
concept SsmKernelBackend = Backend<B> && requires { { ssm_kernels_available(B{}) } -> std::convertible_to<bool>; };

namespace detail {
template <class B>
constexpr void require_ssm_kernels() {
  static_assert(SsmKernelBackend<B>,
                "megacpp_backend_lacks_ssm_kernels: the Mamba mixers need the ssm_* kernels for this backend. "
                "For the CPU, #include <megacpp/nn/mamba.hpp> (it brings megacpp/backends/cpu/ssm_scan.hpp); "
                "for another backend, provide ssm_kernels_available(YourBackend) and the ssm_* overloads "
                "listed in megacpp/nn/mamba/kernels.hpp.");
}
}  // namespace detail

}  // namespace megacpp
