/// \file
/// megacpp/core/kernels/m2rnn_scan.hpp: the M2RNNScan kernel contract, the M2RNN recurrence over
/// whole training sequences and its exact backward (BPTT). The op that records it as one graph
/// node: megacpp/nn/m2rnn/recurrence.hpp; the decode step: m2rnn_step.hpp.
///
/// M2RNN (Mishra, Tan, Stoica, Gonzalez, Dao; arXiv 2603.14360), as the reference
/// open-lm-engine/accelerated-model-architectures xma/layers/m2rnn/op.py (`m2rnn_torch`) computes
/// it, per (row b, head h) with a K x V matrix state H and the head's V x V state weight W:
///
///   Z_t = tanh(H_{t-1} W + k_t v_t^T)      (K x V)   H_t = f_t H_{t-1} + (1 - f_t) Z_t
///   y_t = H_t^T q_t                         (V)       H = 0 before every document's first token
///
/// Each element takes m2rnn_step.hpp's operations in their order (m2rnn_preactivation,
/// m2rnn_state_element, m2rnn_readout). Backward, with G = dL/dH_t (the carry from t + 1 plus this
/// token's output term), per token from the last:
///
///   G += q_t dy_t^T, then G = clamp(G, -c, c) when gradient_clipping c > 0 (the reference's
///   clip_gradients; c = 0 is exact BPTT)                     dq_t[i] = sum_c H_t[i, c] dy_t[c]
///   df_t   = sum_i (sum_c G[i, c] (H_{t-1}[i, c] - Z[i, c]))   rows' sums added in row order
///   dA     = (1 - f_t) G (1 - Z^2)                             (A = H_{t-1} W + k v^T)
///   dk_t[i] = sum_c dA[i, c] v_c     dv_t[c] = sum_i dA[i, c] k_i     dW[a, c] += sum_i H_{t-1}[i, a] dA[i, c]
///   G_{t-1}[i, a] = f_t G[i, a] + sum_c dA[i, c] W[a, c]      (zero across a document start)
///
/// every sum in index order, so backends differ only where their compilers fuse multiply-adds
/// differently (tests/cuda_emulation/test_m2rnn_scan.cpp measures it: an ulp here and there). The forward
/// saves the state entering every chunk of `checkpoint_every` tokens (before a document reset at
/// the chunk's first token); the backward recomputes a chunk's states from its checkpoint (the
/// reference's Triton backward does the same with its bwd_chunk_size). dW is summed per (row,
/// head), then over rows in row order: deterministic.
///
/// Layouts (row-major): q, k (batch, seq, heads, K); v, y (batch, seq, heads, V); f (batch, seq,
/// heads); W (heads, V, V); checkpoints (batch, heads, chunks, K, V).
#pragma once

#include "megacpp/core/config.hpp"
#include "megacpp/core/error.hpp"
#include "megacpp/core/kernels/documents.hpp"
#include "megacpp/core/kernels/kernel.hpp"
#include "megacpp/core/kernels/m2rnn_step.hpp"

namespace megacpp::kernels {

/// The sizes of one recurrence call.
struct M2RNNScanParams {
  index_t batch = 0;              ///< rows
  index_t seq = 0;                ///< tokens per row
  index_t heads = 0;              ///< recurrent heads
  index_t k_dim = 0;              ///< K: rows of each head's state (q and k width)
  index_t v_dim = 0;              ///< V: columns of each head's state (v width; W is V x V)
  double gradient_clipping = 0;   ///< clamp of the state gradient in the backward; 0: none
  index_t checkpoint_every = 64;  ///< tokens per saved state (the backward recomputes the rest)

  /// Saved states per (row, head): ceil(seq / checkpoint_every).
  MEGACPP_HD index_t chunks() const { return (seq + checkpoint_every - 1) / checkpoint_every; }

  /// Throws unless every size is positive and the clipping bound is not negative.
  void validate(const char* op) const {
    check(batch > 0 && seq > 0 && heads > 0 && k_dim > 0 && v_dim > 0, op,
          "batch, seq, heads, k_dim, v_dim must be positive, got ", batch, ", ", seq, ", ", heads, ", ", k_dim, ", ",
          v_dim);
    check(gradient_clipping >= 0, op, "gradient_clipping must be >= 0 (0 = none), got ", gradient_clipping);
    check(checkpoint_every >= 1, op, "checkpoint_every must be >= 1, got ", checkpoint_every);
  }
};

/// The recurrence's operands (backend memory).
template <class T>
struct M2RNNScanOperands {
  const T* q = nullptr;  ///< (batch, seq, heads, K)
  const T* k = nullptr;  ///< (batch, seq, heads, K)
  const T* v = nullptr;  ///< (batch, seq, heads, V)
  const T* f = nullptr;  ///< (batch, seq, heads): the decay gate, in (0, 1)
  const T* W = nullptr;  ///< (heads, V, V)
};

/// The gradients a backward adds into (backend memory); each may be null (not needed).
template <class T>
struct M2RNNScanGradients {
  T* q = nullptr;  ///< like q
  T* k = nullptr;  ///< like k
  T* v = nullptr;  ///< like v
  T* f = nullptr;  ///< like f
  T* W = nullptr;  ///< (heads, V, V): the rows' sum (in row order) is added
};

/// The training recurrence of M2RNN on backend B (contract: this file); CPU:
/// megacpp/backends/cpu/detail/m2rnn_scan.hpp.
template <class B>
struct M2RNNScan {
  static constexpr bool available = false;  ///< B has no M2RNN training recurrence
  /// Writes y (batch, seq, heads, V) and, when checkpoints is not null, the state entering every
  /// chunk (batch, heads, chunks, K, V).
  template <class T>
  static void forward(const M2RNNScanParams&, const DocumentLayout<B>&, const M2RNNScanOperands<T>&, T* /*y*/,
                      T* /*checkpoints*/) {
    require<M2RNNScan>();
  }
  /// Adds into every gradient that is not null, from dy and the forward's checkpoints.
  template <class T>
  static void backward(const M2RNNScanParams&, const DocumentLayout<B>&, const M2RNNScanOperands<T>&, const T* /*dy*/,
                       const T* /*checkpoints*/, const M2RNNScanGradients<T>&) {
    require<M2RNNScan>();
  }
};

}  // namespace megacpp::kernels
