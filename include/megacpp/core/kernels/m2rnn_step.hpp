/// \file
/// megacpp/core/kernels/m2rnn_step.hpp: the M2RNNStep kernel contract, one decode step of the
/// M2RNN recurrence for every (row, head) (the layer and its cache: megacpp/nn/m2rnn/m2rnn.hpp).
///
/// M2RNN (Mishra, Tan, Stoica, Gonzalez, Dao; arXiv 2603.14360; open-lm-engine/
/// accelerated-model-architectures xma/layers/m2rnn/op.py), per row b and head h with a K x V
/// matrix state H and the head's V x V state weight W:
///
///   A[i, c]   = k_i v_c + sum_a H_{t-1}[i, a] W[a, c]            a in order
///   H_t[i, c] = f H_{t-1}[i, c] + (1 - f) tanh(A[i, c])
///   y_c       = sum_i q_i H_t[i, c]                               i in order
///
/// Row i of H_t reads only row i of H_{t-1}, and every element of a row its own column of W:
/// m2rnn_state_element is that element and m2rnn_readout y's, written once for every backend
/// (MEGACPP_HD). The training recurrence (the M2RNNScan contract, m2rnn_scan.hpp) takes the same
/// operations per element in the same order (the CPU's in vectorized loops, whose fused
/// multiply-adds the compiler may place differently: an ulp apart). The rows of the batch are
/// independent: a row's outputs never read another row's cache, which keeps decoding's
/// document-masking invariant (docs/recipe.md).
#pragma once

#include <cmath>

#include "megacpp/core/config.hpp"
#include "megacpp/core/error.hpp"
#include "megacpp/core/kernels/kernel.hpp"

namespace megacpp::kernels {

/// The sizes of one step.
struct M2RNNStepParams {
  index_t batch = 0;  ///< rows, one new token each
  index_t heads = 0;  ///< recurrent heads
  index_t k_dim = 0;  ///< K: rows of each head's state (q and k width)
  index_t v_dim = 0;  ///< V: columns of each head's state (v width; W is V x V)

  /// Throws unless every size is positive.
  void validate(const char* op) const {
    check(batch > 0 && heads > 0 && k_dim > 0 && v_dim > 0, op, "batch, heads, k_dim, v_dim must be positive, got ",
          batch, ", ", heads, ", ", k_dim, ", ", v_dim);
  }
};

/// The data of one step (backend memory). The state is read and updated in place.
template <class T>
struct M2RNNStepArgs {
  const T* q = nullptr;  ///< (batch, heads, K)
  const T* k = nullptr;  ///< (batch, heads, K)
  const T* v = nullptr;  ///< (batch, heads, V)
  const T* f = nullptr;  ///< (batch, heads): the decay gate, in (0, 1)
  const T* W = nullptr;  ///< (heads, V, V): the state weights
  T* state = nullptr;    ///< (batch, heads, K, V): H, updated
  T* y = nullptr;        ///< (batch, heads, V): written
};

/// A[i, c] = k_i v_c + sum_j H_{t-1}[i, j] W[j, c] (j in order) from row i of H_{t-1} (`h_prev_row`,
/// V values), the head's W (V x V), k_i and v (V): what the tanh of the step takes.
template <class T>
MEGACPP_HD T m2rnn_preactivation(index_t V, const T* h_prev_row, const T* W, T k_i, const T* v, index_t c) {
  T a = k_i * v[c];
  for (index_t j = 0; j < V; ++j) a += h_prev_row[j] * W[j * V + c];
  return a;
}

/// H_t[i, c] from row i of H_{t-1} (`h_prev_row`, V values), the head's W (V x V), k_i, v (V) and f.
template <class T>
MEGACPP_HD T m2rnn_state_element(index_t V, const T* h_prev_row, const T* W, T k_i, const T* v, T f, index_t c) {
  using std::tanh;  // the element type's overload (the device's under nvcc)
  return f * h_prev_row[c] + (T(1) - f) * tanh(m2rnn_preactivation<T>(V, h_prev_row, W, k_i, v, c));
}

/// y_c = sum_i q_i H_t[i, c], i in order; `state` is H_t (K x V).
template <class T>
MEGACPP_HD T m2rnn_readout(index_t K, index_t V, const T* state, const T* q, index_t c) {
  T y = T(0);
  for (index_t i = 0; i < K; ++i) y += q[i] * state[i * V + c];
  return y;
}

/// The decode step of the M2RNN recurrence on backend B (contract: this file); CPU:
/// megacpp/backends/cpu/detail/m2rnn_step.hpp.
template <class B>
struct M2RNNStep {
  static constexpr bool available = false;  ///< B has no M2RNN decode step
  /// Advances every row's state by one token; writes y.
  template <class T>
  static void step(const M2RNNStepParams&, const M2RNNStepArgs<T>&) {
    require<M2RNNStep>();
  }
};

}  // namespace megacpp::kernels
