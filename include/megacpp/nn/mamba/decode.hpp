// megacpp/nn/mamba/decode.hpp: the explicit decode caches of the SSM mixers' steps.
//
// Decoding advances one token at a time with the literal recurrence. Everything the next token
// needs from the past lives in a cache:
//   Mamba-3: the state H, the angle theta, and the previous token's rotated k and (up-projected)
//            v for the trapezoid's beta term (mamba3.py's angle_dt_state, ssm_state, k_state,
//            v_state; our state is stored (N, P), see sequential_scan.hpp). Mamba3::step runs
//            the SsmStep kernel contract (core/kernels/ssm_step.hpp) on the cache in place, in
//            backend memory;
//   Mamba-2: the conv window (the last K - 1 conv inputs) and the state H; Mamba2::step runs the
//            CausalConv1d contract on the window (conv_window_step, nn/mamba/conv1d.hpp) and the
//            SsmStep contract on the state, in backend memory.
// A new document in a row resets that row's cache to zero (docs/recipe.md "Document masking"):
// pass `new_document` to the layer's step(), or call reset(row).
#pragma once

#include <cmath>
#include <vector>

#include "megacpp/core/kernels/documents.hpp"
#include "megacpp/core/tensor.hpp"
#include "megacpp/nn/cache_shape.hpp"

namespace megacpp {

/// Mamba-3 decode cache, one entry per row of the batch.
template <class T, Backend B>
struct Mamba3Cache {
  Tensor<T, B> state;   ///< (batch, heads, N, P): H^T
  Tensor<T, B> angle;   ///< (batch, heads, S): theta of the last token, in [0, 2 pi)
  Tensor<T, B> k_prev;  ///< (batch, heads, R, N): the last token's rotated k (B + bias)
  Tensor<T, B> v_prev;  ///< (batch, heads, R, P): the last token's v (after the MIMO up-projection)

  /// A zeroed cache (every row at the start of a document).
  static Mamba3Cache zeros(index_t batch, index_t heads, index_t rank, index_t d_state, index_t head_dim, index_t n_angles) {
    return {Tensor<T, B>::zeros({batch, heads, d_state, head_dim}), Tensor<T, B>::zeros({batch, heads, n_angles}),
            Tensor<T, B>::zeros({batch, heads, rank, d_state}), Tensor<T, B>::zeros({batch, heads, rank, head_dim})};
  }
  /// Rows the cache holds.
  index_t batch() const { return state.defined() ? state.shape()[0] : 0; }
  /// Starts a new document in `row`: everything the past left is zeroed.
  void reset(index_t row) {
    check(row >= 0 && row < batch(), "Mamba3Cache::reset", "row ", row, " out of range for batch ", batch());
    for (Tensor<T, B>* t : {&state, &angle, &k_prev, &v_prev}) {
      Tensor<T, B> r = t->rows(row, row + 1);
      r.fill(T(0));
    }
  }
};

/// Mamba-2 decode cache, one entry per row of the batch.
template <class T, Backend B>
struct Mamba2Cache {
  Tensor<T, B> conv;   ///< (batch, K - 1, conv_dim): the last K - 1 conv inputs, oldest first
  Tensor<T, B> state;  ///< (batch, heads, N, P): H^T
  DocumentLayout<B> window_docs;  ///< (batch, K): each row's window and new token as one document

  /// A zeroed cache (every row at the start of a document).
  static Mamba2Cache zeros(index_t batch, index_t width, index_t conv_dim, index_t heads, index_t d_state, index_t head_dim) {
    return {Tensor<T, B>::zeros({batch, width - 1, conv_dim}), Tensor<T, B>::zeros({batch, heads, d_state, head_dim}),
            DocumentLayout<B>::single_document(batch, width)};
  }
  /// Rows the cache holds.
  index_t batch() const { return state.defined() ? state.shape()[0] : 0; }
  /// Starts a new document in `row`: the conv window and the state are zeroed.
  void reset(index_t row) {
    check(row >= 0 && row < batch(), "Mamba2Cache::reset", "row ", row, " out of range for batch ", batch());
    for (Tensor<T, B>* t : {&conv, &state}) {
      Tensor<T, B> r = t->rows(row, row + 1);
      if (r.numel()) r.fill(T(0));
    }
  }
};

}  // namespace megacpp
