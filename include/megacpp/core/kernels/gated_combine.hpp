/// \file
/// megacpp/core/kernels/gated_combine.hpp: the GatedCombine kernel contract, the MoE layer's
/// return from the expert-sorted buffer to the tokens, with each expert's output weighted by its
/// gate.
///
/// After the grouped products, slot j of token t sits at row r = row_of_slot[j * tokens + t] of
/// the sorted buffer ys (megacpp/nn/moe/dispatch.hpp). With gate (tokens, k):
///
///   forward   y[t, c]      = sum_{j < k} gate[t, j] ys[r(t, j), c]     slots added in order j = 0, 1, ...
///   backward  dys[r, c]   += gate[t, j] dy[t, c]                        r = r(t, j): each row once
///             dgate[t, j] += sum_c dy[t, c] ys[r(t, j), c]
///
/// One pass over the rows each way, where scaling rows and then gathering slot by slot took five
/// (the unfused graph: broadcast the gate, multiply, one gather per slot, the adds; and their
/// backwards). Every output row is a function of its own token's rows only, summed in slot order
/// on every backend and thread count, so the layer keeps the document-masking invariant bitwise
/// (docs/recipe.md). `row_of_slot` is backend memory (int32, k * tokens entries, a permutation
/// of the rows).
#pragma once

#include <cstdint>

#include "megacpp/core/config.hpp"
#include "megacpp/core/error.hpp"
#include "megacpp/core/kernels/kernel.hpp"

namespace megacpp::kernels {

/// Sizes of one combine.
struct GatedCombineParams {
  index_t tokens = 0;  ///< tokens routed this step
  index_t k = 0;       ///< experts (slots) per token
  index_t d = 0;       ///< row width (d_model)

  /// Rows of the sorted buffer: tokens * k.
  index_t rows() const { return tokens * k; }

  /// Throws unless tokens >= 0 and k, d > 0.
  void validate(const char* op) const {
    check(tokens >= 0 && k > 0 && d > 0, op, "tokens must be >= 0 and k, d positive, got tokens ", tokens, ", k ", k,
          ", d ", d);
  }
};

/// Data of a forward call (backend memory).
template <class T>
struct GatedCombineArgs {
  const std::int32_t* row_of_slot = nullptr;  ///< (k, tokens): the sorted row of slot j of token t
  const T* gate = nullptr;                    ///< (tokens, k)
  const T* ys = nullptr;                      ///< (tokens * k, d), sorted by expert
  T* y = nullptr;                             ///< forward: written; (tokens, d)
};

/// Gradients of a backward call: from dy, added into dys and dgate (either may be null).
template <class T>
struct GatedCombineGrads {
  const T* dy = nullptr;  ///< dL/dy (tokens, d)
  T* dys = nullptr;       ///< += dL/dys (tokens * k, d)
  T* dgate = nullptr;     ///< += dL/dgate (tokens, k)
};

/// The gated combine of backend B (contract: this file); CPU:
/// megacpp/backends/cpu/detail/gated_combine.hpp.
template <class B>
struct GatedCombine {
  static constexpr bool available = false;  ///< B has no gated combine
  /// y[t] = sum_j gate[t, j] ys[row_of_slot[j, t]].
  template <class T>
  static void forward(const GatedCombineParams&, const GatedCombineArgs<T>&) {
    require<GatedCombine>();
  }
  /// dys[row] += gate dy[t], dgate[t, j] += dy[t] . ys[row] (`args.y` unused).
  template <class T>
  static void backward(const GatedCombineParams&, const GatedCombineArgs<T>&, const GatedCombineGrads<T>&) {
    require<GatedCombine>();
  }
};

}  // namespace megacpp::kernels
