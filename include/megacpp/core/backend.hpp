/// \file
/// megacpp/core/backend.hpp: the kernel contract every backend implements (CPU, CUDA).
///
/// A backend is a tag type with static member functions; the same layer source instantiates
/// against any type satisfying `Backend`. Layers and autograd ops call only these functions,
/// never a backend's internals. Pointers are the backend's memory (host memory for Cpu, device
/// memory for Cuda); `index_t` sizes; every kernel is synchronous with respect to later kernels
/// of the same backend. Element types: memory functions take any storage type; compute kernels
/// take float and double (bf16/f16 are converted with `convert` first), except `gemm_bf16`,
/// which multiplies bf16 operands with fp32 sums into an fp32 C (mixed precision).
///
/// Conventions shared by all kernels:
/// - Matrices are row-major. `beta` selects overwrite (0) or accumulate (1) into the output, so
///   backward passes accumulate into gradient buffers without temporaries.
/// - `In<T>` is an elementwise operand. A broadcast operand (`broadcast = true`) is indexed by
///   the innermost coordinate only: broadcasting over leading dims, as `x + bias` needs.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>

#include "megacpp/core/config.hpp"
#include "megacpp/core/dtypes.hpp"

namespace megacpp {

/// Strided batched GEMM, row-major: for b in [0, batch):
///   C_b = alpha * op(A_b) * op(B_b) + beta * C_b, op(X) = X or X^T,
/// with op(A_b) (m, k), op(B_b) (k, n), C_b (m, n); X_b starts at X + b * stride_x.
/// A stride of 0 reuses one matrix for the whole batch (except C, which must not alias).
struct GemmArgs {
  bool trans_a = false;  ///< op(A) = A^T
  bool trans_b = false;  ///< op(B) = B^T
  index_t m = 0;  ///< rows of op(A_b) and C_b
  index_t n = 0;  ///< columns of op(B_b) and C_b
  index_t k = 0;  ///< columns of op(A_b), rows of op(B_b)
  index_t lda = 0;  ///< row stride of A as stored
  index_t ldb = 0;  ///< row stride of B as stored
  index_t ldc = 0;  ///< row stride of C
  index_t stride_a = 0;  ///< elements between batch entries of A (0: one A for every entry)
  index_t stride_b = 0;  ///< elements between batch entries of B (0: one B for every entry)
  index_t stride_c = 0;  ///< elements between batch entries of C
  index_t batch = 1;  ///< number of products

  /// One product of contiguous row-major operands: op(A) (m, k), op(B) (k, n), C (m, n), each
  /// stored densely (lda = k or m, ldb = n or k, ldc = n).
  static GemmArgs dense(bool trans_a, bool trans_b, index_t m, index_t n, index_t k) {
    GemmArgs g;
    g.trans_a = trans_a;
    g.trans_b = trans_b;
    g.m = m;
    g.n = n;
    g.k = k;
    g.lda = trans_a ? m : k;
    g.ldb = trans_b ? k : n;
    g.ldc = n;
    return g;
  }
};

/// An elementwise operand of map/reduce kernels.
template <class T>
struct In {
  const T* data = nullptr;  ///< the operand's first element (backend memory)
  bool broadcast = false;  ///< indexed by the innermost coordinate only
};

/// Bytes allocated through a backend: current and high-water mark (for benches' peak memory).
struct MemoryStats {
  std::size_t current_bytes = 0;  ///< bytes allocated now
  std::size_t peak_bytes = 0;  ///< most bytes allocated at once since the last reset_peak_memory()
};

/// A functor that is valid in every map/reduce kernel (used only to spell the concept).
struct IdentityFunctor {
  /// Returns x.
  template <class T>
  MEGACPP_HD T operator()(T x) const { return x; }
};

/// An in-place update functor that is valid in every update_in_place kernel (only spells the
/// concept).
struct NoOpUpdate {
  /// Leaves the three states as they are.
  template <class T>
  MEGACPP_HD void operator()(T&, T&, T&, T) const {}
  /// Leaves the one state as it is.
  template <class T>
  MEGACPP_HD void operator()(T&, T) const {}
};

/// The kernel contract every backend meets: a backend is a tag type whose static member functions
/// provide memory, batched GEMM, elementwise map/reduce over functors and the row kernels
/// autograd's generic ops are written on, with the conventions of this file. A layer's fused
/// kernels (attention, SSM scan, ...) are separate contracts a backend implements by
/// specialisation (megacpp/core/kernels/). `Cpu` (megacpp/backends/cpu.hpp) is the reference
/// implementation.
// clang-format off
template <class B>
concept Backend = requires(float* p, const float* cp, const bf16* cbf, const std::int32_t* idx, std::size_t n,
                           index_t i, float s, const GemmArgs& g, In<float> in) {
  { B::name } -> std::convertible_to<std::string_view>;
  { B::host_accessible } -> std::convertible_to<bool>;  // data() is dereferenceable on the host
  // memory
  { B::template allocate<float>(n) } -> std::same_as<float*>;
  B::template deallocate<float>(p, n);
  B::template copy_from_host<float>(p, cp, n);
  B::template copy_to_host<float>(p, cp, n);
  B::template copy<float>(p, cp, n);
  B::template fill<float>(p, n, s);
  B::template convert<double, float>(n, static_cast<const double*>(nullptr), p);
  { B::memory_stats() } -> std::same_as<MemoryStats>;
  B::reset_peak_memory();
  B::synchronize();
  // dense algebra
  B::template gemm<float>(g, s, cp, cp, s, p);
  B::gemm_bf16(g, s, cbf, cbf, s, p);  // GemmArgs with bf16 A, B; fp32 sums and C
  // elementwise and reductions over functors
  B::template map<float>(i, i, IdentityFunctor{}, p, in);
  B::template map_to_bf16<float>(i, IdentityFunctor{}, static_cast<bf16*>(nullptr), cp);  // f's results rounded to bf16
  B::template update_in_place<float>(i, NoOpUpdate{}, p, p, p, cp);
  B::template update_in_place<float>(i, NoOpUpdate{}, p, p, p, cp, static_cast<bf16*>(nullptr));  // + a's bf16 rounding
  B::template update_in_place<float>(i, NoOpUpdate{}, p, cp, static_cast<bf16*>(nullptr));  // one state: f(a, x)
  B::template reduce<float>(i, i, i, IdentityFunctor{}, s, s, p, in);
  B::template expand<float>(i, i, i, s, cp, s, p);
  B::template copy_2d<float>(i, i, cp, i, s, p, i);
  B::template transpose<float>(i, i, i, i, i, cp, s, p);
  { B::minmax_index(i, idx) } -> std::same_as<std::pair<std::int32_t, std::int32_t>>;
  // fused row kernels
  B::template softmax<float>(i, i, cp, p);
  B::template softmax_backward<float>(i, i, cp, cp, p);
  B::template log_softmax<float>(i, i, cp, p);
  B::template log_softmax_backward<float>(i, i, cp, cp, p);
  B::template rmsnorm<float>(i, i, cp, cp, s, p, p);
  B::template rmsnorm_backward<float>(i, i, cp, cp, cp, cp, p, p);
  B::template gather_rows<float>(i, i, cp, idx, p);
  B::template scatter_add_rows<float>(i, i, cp, idx, p);
  B::template rope<float>(i, i, i, idx, cp, 1, cp, s, p);
  B::template cross_entropy<float>(i, i, cp, idx, cp, p, p);
  B::template cross_entropy_backward<float>(i, i, cp, cp, idx, cp, s, p);
};
// clang-format on

}  // namespace megacpp
