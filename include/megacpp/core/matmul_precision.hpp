/// \file
/// megacpp/core/matmul_precision.hpp: the precision of matrix-product operands, as kernel
/// parameters carry it (the policies and the thread's scope: megacpp/autograd/precision.hpp).
#pragma once

namespace megacpp {

/// The precision of matrix-product operands: what a product op asks of its kernel.
enum class MatmulPrecision {
  fp32,  ///< fp32 operands, fp32 sums
  bf16,  ///< operands rounded to bf16 (nearest even), fp32 sums and results
};

}  // namespace megacpp
