/// \file
/// megacpp/autograd/precision.hpp: the precision of matrix-product operands (fp32 or bf16 mixed).
///
/// Mixed precision as in Micikevicius et al. 2018 ("Mixed Precision Training", arXiv 1710.03740)
/// and PyTorch's autocast, with bf16 (no loss scaling: bf16 has fp32's exponent range):
///   - parameters, gradients and optimizer state stay fp32 (the "master weights");
///   - a matrix product rounds its operands to bf16 and sums in fp32 (`Backend::gemm_bf16`), in
///     the forward (Y = X W^T) and in the backward (dX = dY W, dW = dY^T X); its fp32 result is
///     added into the fp32 gradient buffers;
///   - the fused attention's products (q k^T, P v and the backward's) likewise where the backend
///     has a bf16 attention kernel (CUDA's tensor cores; kernels::AttentionParams::products), with
///     softmax, log-sum-exp and the row sums in fp32; the CPU's attention stays fp32;
///   - everything else (reductions, softmax, RMSNorm statistics, the SSM recurrence, the loss)
///     runs in fp32 as before.
/// The policy is a type (`Fp32`, `Bf16Mixed`): a model carries it as a template parameter
/// (LM<..., Precision>), and the ops read it through a thread-local scope opened by the model for
/// the duration of its forward, as `NoGrad` does for recording. Each product captures the
/// precision when it is created, so its backward runs in the precision of its forward whenever
/// backward() is called.
#pragma once

#include <concepts>
#include <string_view>

#include "megacpp/core/matmul_precision.hpp"

namespace megacpp {

/// Precision policy: every product in fp32 (the default).
struct Fp32 {
  static constexpr MatmulPrecision matmul = MatmulPrecision::fp32;  ///< operands of products
  static constexpr std::string_view name = "fp32";                  ///< as the trainer prints it
};

/// Precision policy: bf16 product operands with fp32 sums; fp32 master weights, gradients,
/// optimizer state, reductions, normalisation statistics, scans and loss.
struct Bf16Mixed {
  static constexpr MatmulPrecision matmul = MatmulPrecision::bf16;  ///< operands of products
  static constexpr std::string_view name = "bf16";                  ///< as the trainer prints it
};

/// A precision policy: a type naming the precision of product operands.
template <class P>
concept PrecisionPolicy = requires {
  { P::matmul } -> std::convertible_to<MatmulPrecision>;
  { P::name } -> std::convertible_to<std::string_view>;
};

namespace detail {
inline MatmulPrecision& matmul_precision_flag() {
  thread_local MatmulPrecision precision = MatmulPrecision::fp32;
  return precision;
}
}  // namespace detail

/// The precision products created now on this thread use (fp32 unless a scope says otherwise).
inline MatmulPrecision matmul_precision() { return detail::matmul_precision_flag(); }

/// While it lives, products created on this thread use `precision` (scopes nest; the innermost
/// one decides).
class MatmulPrecisionScope {
 public:
  /// Sets the precision on this thread until destruction.
  explicit MatmulPrecisionScope(MatmulPrecision precision) : previous_(detail::matmul_precision_flag()) {
    detail::matmul_precision_flag() = precision;
  }
  /// Restores the previous precision.
  ~MatmulPrecisionScope() { detail::matmul_precision_flag() = previous_; }
  MatmulPrecisionScope(const MatmulPrecisionScope&) = delete;
  MatmulPrecisionScope& operator=(const MatmulPrecisionScope&) = delete;

 private:
  MatmulPrecision previous_;
};

}  // namespace megacpp
