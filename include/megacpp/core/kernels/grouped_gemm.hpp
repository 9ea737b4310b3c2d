/// \file
/// megacpp/core/kernels/grouped_gemm.hpp: the GroupedGemm kernel contract (the MoE experts'
/// products) and its group layout.
///
/// Tokens routed to E experts are sorted by expert into one contiguous buffer; expert g owns rows
/// [offsets[g], offsets[g + 1]) (DeepGEMM's "m-grouped contiguous" layout,
/// deepseek-ai/DeepGEMM `m_grouped_gemm_fp8_fp8_bf16_nt_contiguous`, without its per-group
/// padding to the tile height). Groups may be empty and of any size. Weights are stacked
/// (E, N, K): expert g's matrix is (N, K), the (out_features, in_features) layout of Linear, so
/// an expert reads as a Linear layer and the product is "NT" like DeepGEMM's:
///
///   forward   Y_g  = X_g W_g^T          X (M, K), Y (M, N), M = offsets[E]
///   backward  dX_g += dY_g W_g          dX (M, K)
///             dW_g += dY_g^T X_g        dW (E, N, K)   (an empty group adds nothing)
///
/// One call covers every group, so a backend may schedule (group, tile) pieces together and keep
/// small groups from running one after another (the CPU does; CUDA's one-launch products do, its
/// default issues one cuBLAS GEMM per group), and never pads a group. Every element of Y and dX is a
/// function of its own row of X (dY) and of W_g only, with the arithmetic of the backend's dense
/// GEMM (or of an opt-in path's own tiles, e.g. CUDA's one-launch products): a token's output does
/// not depend on the other rows of its group (the document-masking invariant, docs/recipe.md).
/// `offsets` is host memory on every backend: the router decides the groups on the host.
///
/// Operand precision: the operands (X, W, dY) are of type Operand, the results (Y, dX, dW) of
/// type T. Operand = T sums in T. Operand = bf16 with T = float is the mixed-precision product of
/// autograd/precision.hpp (Micikevicius et al. 2018, arXiv 1710.03740): bf16 operands, every sum
/// and every result fp32, each group's product with the arithmetic of the backend's `gemm_bf16`
/// (an opt-in path: the same exact products summed in its own order), as under Bf16Mixed.
#pragma once

#include <type_traits>

#include "megacpp/core/config.hpp"
#include "megacpp/core/dtypes.hpp"
#include "megacpp/core/error.hpp"
#include "megacpp/core/kernels/kernel.hpp"

namespace megacpp::kernels {

/// Sizes and group layout of one grouped product.
struct GroupedGemmParams {
  index_t groups = 0;                 ///< E, number of experts (groups)
  index_t k = 0;                      ///< K, input features
  index_t n = 0;                      ///< N, output features
  const index_t* offsets = nullptr;   ///< host, E + 1 entries: 0 = offsets[0] <= ... <= offsets[E] = M

  /// M, the rows of X and Y (all groups).
  index_t rows() const { return offsets[groups]; }

  /// Throws unless the layout is E + 1 non-decreasing offsets from 0, with positive sizes.
  void validate(const char* op) const {
    check(groups > 0 && k > 0 && n > 0, op, "groups, k and n must be positive, got groups ", groups, ", k ", k, ", n ", n);
    check(offsets != nullptr, op, "the group layout (offsets) is missing");
    check(offsets[0] == 0, op, "group offsets must start at 0, got ", offsets[0]);
    for (index_t g = 0; g < groups; ++g)
      check(offsets[g + 1] >= offsets[g], op, "group ", g, " has negative size: offsets ", offsets[g], " then ",
            offsets[g + 1]);
  }
};

/// Whether a backend's grouped product takes Operand operands with T results: the same type, or
/// bf16 operands with fp32 sums and results (see the file comment).
template <class T, class Operand>
inline constexpr bool grouped_gemm_operands =
    std::is_same_v<T, Operand> || (std::is_same_v<T, float> && std::is_same_v<Operand, bf16>);

/// Data of a forward call (backend memory).
template <class T, class Operand = T>
struct GroupedGemmArgs {
  const Operand* x = nullptr;  ///< (M, K), rows sorted by group
  const Operand* w = nullptr;  ///< (E, N, K)
  T* y = nullptr;              ///< forward: written; (M, N)
};

/// Gradients of a backward call: from dy, added into dx and dw (either may be null).
template <class T, class Operand = T>
struct GroupedGemmGrads {
  const Operand* dy = nullptr;  ///< dL/dY (M, N), rounded to Operand once by the caller
  T* dx = nullptr;              ///< += dL/dX (M, K)
  T* dw = nullptr;              ///< += dL/dW (E, N, K)
};

/// The grouped expert GEMM of backend B (contract: this file); CPU:
/// megacpp/backends/cpu/detail/grouped_gemm.hpp.
template <class B>
struct GroupedGemm {
  static constexpr bool available = false;  ///< B has no grouped GEMM
  /// y_g = x_g w_g^T for every group.
  template <class T, class Operand = T>
  static void forward(const GroupedGemmParams&, const GroupedGemmArgs<T, Operand>&) {
    require<GroupedGemm>();
  }
  /// dx_g += dy_g w_g, dw_g += dy_g^T x_g (`args.y` unused).
  template <class T, class Operand = T>
  static void backward(const GroupedGemmParams&, const GroupedGemmArgs<T, Operand>&,
                       const GroupedGemmGrads<T, Operand>&) {
    require<GroupedGemm>();
  }
};

}  // namespace megacpp::kernels
