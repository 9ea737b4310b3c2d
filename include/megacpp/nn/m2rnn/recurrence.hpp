// megacpp/nn/m2rnn/recurrence.hpp: the M2RNN recurrence, its exact backward (BPTT), and the op
// that records both as one graph node.
//
// M2RNN (Mishra, Tan, Stoica, Gonzalez, Dao; arXiv 2603.14360), as the reference
// open-lm-engine/accelerated-model-architectures xma/layers/m2rnn/op.py (`m2rnn_torch`) computes
// it, per (row, head) with a K x V matrix state H and a V x V state weight W:
//
//   Z_t = tanh(H_{t-1} W + k_t v_t^T)              (K x V; the non-linear state transition)
//   H_t = f_t H_{t-1} + (1 - f_t) Z_t              (f_t in (0, 1): the decay gate, one per head)
//   y_t = H_t^T q_t                                (V)
//
// H is zero before the first token of every document (docs/masking.md): the reference gets the
// same from `cu_seqlens`. The recurrence is sequential in time; the (row, head) items are
// independent and run in parallel (OpenMP). The state is kept in T (fp32 for float, fp64 for the
// gradchecks).
//
// Backward, with G = dL/dH_t (the carry from t + 1 plus this token's output term):
//   G     += q_t dy_t^T                      dq_t = H_t dy_t
//   G      = clamp(G, -c, c)                 (only with gradient_clipping c > 0, the reference's
//                                             clip_gradients on H_t; c = 0 is exact BPTT)
//   df_t   = <G, H_{t-1} - Z_t>              dA = (1 - f_t) G (1 - Z_t^2)      (A = H_{t-1} W + k v^T)
//   dk_t   = dA v_t       dv_t = dA^T k_t    dW += H_{t-1}^T dA
//   G_{t-1} = f_t G + dA W^T                 (zero across a document start: H_{t-1} was reset)
// The forward saves the state entering every chunk of `checkpoint_every` tokens (batch, heads,
// chunks, K, V), not every H_t; the backward recomputes a chunk's states from its checkpoint, then
// walks the chunk backwards, recomputing Z_t from H_{t-1} (the reference's Triton backward does the
// same with its bwd_chunk_size, 64 by default). Memory: 1 / checkpoint_every of all states, for one
// more forward's work.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "megacpp/autograd/function.hpp"
#include "megacpp/autograd/grad_mode.hpp"
#include "megacpp/core/functors.hpp"
#include "megacpp/core/kernels/documents.hpp"
#include "megacpp/nn/mamba/sequential_scan.hpp"

namespace megacpp {

/// Sizes of one M2RNN recurrence: q, k (batch, seq, heads, K), v (batch, seq, heads, V),
/// f (batch, seq, heads), W (heads, V, V).
struct M2RNNGeometry {
  index_t batch = 0;  ///< rows
  index_t seq = 0;    ///< tokens per row
  index_t heads = 0;  ///< recurrent heads
  index_t k_dim = 0;  ///< K: rows of each head's state (q and k width)
  index_t v_dim = 0;  ///< V: columns of each head's state (v width; W is V x V)
  double gradient_clipping = 0;  ///< clamp of the state gradient in the backward; 0: none
  index_t checkpoint_every = 64;  ///< tokens per saved state (the backward recomputes the rest)
  /// Saved states per (row, head): ceil(seq / checkpoint_every).
  index_t chunks() const { return (seq + checkpoint_every - 1) / checkpoint_every; }
};

namespace m2rnn_reference {

/// One token for one head, on host memory: state (K, V) advances in place, y (V) = H_t^T q.
/// `row` is scratch of V elements. The naive kernel the forward and backward loop over. Each
/// element takes the M2RNNStep contract's operations in its order (kernels::m2rnn_state_element,
/// kernels::m2rnn_readout: the decode step's); the loops run over columns innermost so that the
/// compiler vectorizes them (bench/m2rnn).
template <class T>
void recurrence_step(index_t K, index_t V, T* state, const T* q, const T* k, const T* v, T f, const T* W, T* y, T* row) {
  for (index_t i = 0; i < K; ++i) {
    T* h = state + i * V;  // row i of H_{t-1}: row i of A needs only this row
    for (index_t b = 0; b < V; ++b) row[b] = k[i] * v[b];
    for (index_t a = 0; a < V; ++a) {
      const T ha = h[a];
      const T* wa = W + a * V;
      for (index_t b = 0; b < V; ++b) row[b] += ha * wa[b];
    }
    for (index_t b = 0; b < V; ++b) h[b] = f * h[b] + (T(1) - f) * std::tanh(row[b]);
  }
  for (index_t b = 0; b < V; ++b) y[b] = T(0);
  for (index_t i = 0; i < K; ++i) {
    const T qi = q[i];
    const T* h = state + i * V;
    for (index_t b = 0; b < V; ++b) y[b] += qi * h[b];
  }
}

/// The whole recurrence on host arrays; `checkpoints` (batch, heads, chunks, K, V) receives, when
/// not null, the state H_{t-1} entering each chunk's first token t (before any document reset).
template <class T>
void forward_host(const M2RNNGeometry& g, const std::int32_t* doc_ids, const T* q, const T* k, const T* v, const T* f,
                  const T* W, T* y, T* checkpoints) {
  const index_t H = g.heads, K = g.k_dim, V = g.v_dim, items = g.batch * H;
#if defined(_OPENMP)
#pragma omp parallel for schedule(static)
#endif
  for (index_t item = 0; item < items; ++item) {
    const index_t b = item / H, h = item % H;
    std::vector<T> state(static_cast<std::size_t>(K * V)), row(static_cast<std::size_t>(V));
    for (index_t t = 0; t < g.seq; ++t) {
      if (checkpoints && t % g.checkpoint_every == 0)
        std::copy(state.begin(), state.end(), checkpoints + (item * g.chunks() + t / g.checkpoint_every) * K * V);
      if (kernels::starts_document(doc_ids + b * g.seq, t)) std::fill(state.begin(), state.end(), T(0));
      const index_t bth = (b * g.seq + t) * H + h;
      recurrence_step<T>(K, V, state.data(), q + bth * K, k + bth * K, v + bth * V, f[bth], W + h * V * V, y + bth * V,
                         row.data());
    }
  }
}

/// Gradients of the recurrence on host arrays (see the file comment). dq, dk, dv, df are written
/// (every element); dW (heads, V, V) is written as the sum over rows, added in row order.
template <class T>
void backward_host(const M2RNNGeometry& g, const std::int32_t* doc_ids, const T* q, const T* k, const T* v, const T* f,
                   const T* W, const T* checkpoints, const T* dy, T* dq, T* dk, T* dv, T* df, T* dW) {
  const index_t H = g.heads, K = g.k_dim, V = g.v_dim, items = g.batch * H;
  const T clip = static_cast<T>(g.gradient_clipping);
  // One dW per (row, head), summed over rows afterwards in a fixed order: deterministic.
  std::vector<T> dW_items(static_cast<std::size_t>(items * V * V), T(0));
#if defined(_OPENMP)
#pragma omp parallel for schedule(static)
#endif
  for (index_t item = 0; item < items; ++item) {
    const index_t b = item / H, h = item % H;
    const T* Wh = W + h * V * V;
    T* dWi = dW_items.data() + item * V * V;
    const index_t C = g.checkpoint_every;
    std::vector<T> G(static_cast<std::size_t>(K * V), T(0)), G_prev(G.size()), dA(G.size()), zero(G.size(), T(0)),
        Z(static_cast<std::size_t>(V)), y_unused(static_cast<std::size_t>(V)),
        chunk_states(static_cast<std::size_t>(std::min(C, g.seq) * K * V));  // H_t for the chunk's tokens
    for (index_t t = g.seq - 1; t >= 0; --t) {
      const index_t t0 = t - t % C;
      const T* entering = checkpoints + (item * g.chunks() + t0 / C) * K * V;  // H_{t0 - 1}
      if (t == g.seq - 1 || t % C == C - 1) {
        // recompute the chunk's states from its checkpoint, with the forward's resets
        std::copy(entering, entering + K * V, chunk_states.begin());
        for (index_t s = t0; s <= t; ++s) {
          T* Hs = chunk_states.data() + (s - t0) * K * V;
          if (s > t0) std::copy(Hs - K * V, Hs, Hs);
          if (kernels::starts_document(doc_ids + b * g.seq, s)) std::fill(Hs, Hs + K * V, T(0));
          const index_t bsh = (b * g.seq + s) * H + h;
          recurrence_step<T>(K, V, Hs, q + bsh * K, k + bsh * K, v + bsh * V, f[bsh], Wh, y_unused.data(), Z.data());
        }
      }
      const bool first = kernels::starts_document(doc_ids + b * g.seq, t);
      const index_t bth = (b * g.seq + t) * H + h;
      const T* Ht = chunk_states.data() + (t - t0) * K * V;
      const T* Hp = first ? zero.data() : (t == t0 ? entering : Ht - K * V);  // H_{t-1}
      const T* dyt = dy + bth * V;
      const T* qt = q + bth * K;
      const T* kt = k + bth * K;
      const T* vt = v + bth * V;
      const T ft = f[bth];
      T dft = 0;
      for (index_t i = 0; i < K; ++i) {
        const T* hi = Ht + i * V;
        T* Gi = G.data() + i * V;
        T dqi = 0;
        for (index_t c = 0; c < V; ++c) {
          dqi += hi[c] * dyt[c];
          Gi[c] += qt[i] * dyt[c];
          if (clip > T(0)) Gi[c] = std::clamp(Gi[c], -clip, clip);
        }
        dq[bth * K + i] = dqi;
        // Z row i from H_{t-1} row i, then dA row i
        const T* hp = Hp + i * V;
        for (index_t c = 0; c < V; ++c) Z[c] = kt[i] * vt[c];
        for (index_t a = 0; a < V; ++a) {
          const T ha = hp[a];
          const T* wa = Wh + a * V;
          for (index_t c = 0; c < V; ++c) Z[c] += ha * wa[c];
        }
        T* dAi = dA.data() + i * V;
        for (index_t c = 0; c < V; ++c) {
          const T z = std::tanh(Z[c]);
          dft += Gi[c] * (hp[c] - z);
          dAi[c] = (T(1) - ft) * Gi[c] * (T(1) - z * z);
        }
      }
      df[bth] = dft;
      // dk = dA v, dv = dA^T k, dW += H_{t-1}^T dA, G_{t-1} = f G + dA W^T
      for (index_t c = 0; c < V; ++c) dv[bth * V + c] = 0;
      for (index_t i = 0; i < K; ++i) {
        const T* dAi = dA.data() + i * V;
        const T* hp = Hp + i * V;
        T dki = 0;
        for (index_t c = 0; c < V; ++c) {
          dki += dAi[c] * vt[c];
          dv[bth * V + c] += dAi[c] * kt[i];
        }
        dk[bth * K + i] = dki;
        if (!first)
          for (index_t a = 0; a < V; ++a) {
            const T ha = hp[a];
            T* dWa = dWi + a * V;
            for (index_t c = 0; c < V; ++c) dWa[c] += ha * dAi[c];
          }
        T* Gp = G_prev.data() + i * V;
        const T* Gi = G.data() + i * V;
        for (index_t a = 0; a < V; ++a) {
          const T* wa = Wh + a * V;
          T acc = ft * Gi[a];
          for (index_t c = 0; c < V; ++c) acc += dAi[c] * wa[c];
          Gp[a] = acc;
        }
      }
      if (first) std::fill(G.begin(), G.end(), T(0));  // nothing flows into the previous document
      else G.swap(G_prev);
    }
  }
  std::fill(dW, dW + H * V * V, T(0));
  for (index_t b = 0; b < g.batch; ++b)
    for (index_t h = 0; h < H; ++h) {
      const T* src = dW_items.data() + (b * H + h) * V * V;
      T* dst = dW + h * V * V;
      for (index_t e = 0; e < V * V; ++e) dst[e] += src[e];
    }
}

}  // namespace m2rnn_reference

namespace detail {
// Adds a host-computed gradient to x's accumulator (the whole gradient at once).
template <class T, Backend B>
void add_host_gradient(const Var<T, B>& x, const std::vector<T>& g) {
  Tensor<T, B> t = Tensor<T, B>::from_host(x.shape(), g);
  if (!x.grad().defined()) {
    x.take_grad(std::move(t));
    return;
  }
  put_gradient<T, B>(x.grad_sink(), 1, x.shape().numel(), fn::Identity{}, In<T>{t.data()});
}

inline M2RNNGeometry check_m2rnn_inputs(const char* who, const Shape& q, const Shape& k, const Shape& v, const Shape& f,
                                        const Shape& W, index_t doc_batch, index_t doc_seq) {
  check(q.rank() == 4, who, "q must be (batch, seq, heads, K), got ", q);
  M2RNNGeometry g{q[0], q[1], q[2], q[3], 0, 0, 64};
  check(v.rank() == 4 && v[0] == g.batch && v[1] == g.seq && v[2] == g.heads, who, "v must be (", g.batch, ", ", g.seq, ", ",
        g.heads, ", V), got ", v);
  g.v_dim = v[3];
  check(k == q, who, "k ", k, " must have q's shape ", q);
  check(f == Shape{g.batch, g.seq, g.heads}, who, "f must be (", g.batch, ", ", g.seq, ", ", g.heads, "), got ", f);
  check(W == Shape{g.heads, g.v_dim, g.v_dim}, who, "W must be (", g.heads, ", ", g.v_dim, ", ", g.v_dim, "), got ", W);
  check(doc_batch == g.batch && doc_seq == g.seq, who, "document layout (", doc_batch, ", ", doc_seq,
        ") does not match (batch, seq) = (", g.batch, ", ", g.seq, ")");
  return g;
}
}  // namespace detail

/// The M2RNN recurrence: y (batch, seq, heads, V) = H_t^T q_t per token and head, with the state
/// reset at every document start of `docs`. Differentiable in q, k, v, f and W (exact BPTT unless
/// gradient_clipping > 0); the backward keeps one state per `checkpoint_every` tokens.
template <class T, Backend B>
Var<T, B> m2rnn_recurrence(const Var<T, B>& q, const Var<T, B>& k, const Var<T, B>& v, const Var<T, B>& f,
                           const Var<T, B>& W, const DocumentLayout<B>& docs, double gradient_clipping = 0.0,
                           index_t checkpoint_every = 64) {
  M2RNNGeometry g = detail::check_m2rnn_inputs("m2rnn_recurrence", q.shape(), k.shape(), v.shape(), f.shape(), W.shape(),
                                               docs.batch, docs.seq);
  check(gradient_clipping >= 0, "m2rnn_recurrence", "gradient_clipping must be >= 0 (0 = none), got ", gradient_clipping);
  check(checkpoint_every >= 1, "m2rnn_recurrence", "checkpoint_every must be >= 1, got ", checkpoint_every);
  g.gradient_clipping = gradient_clipping;
  g.checkpoint_every = checkpoint_every;
  const bool needs_grad = grad_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad() ||
                                             f.requires_grad() || W.requires_grad());
  std::vector<std::vector<T>> keep;
  keep.reserve(5);
  const T* qh = detail::host_data(q.value(), keep);
  const T* kh = detail::host_data(k.value(), keep);
  const T* vh = detail::host_data(v.value(), keep);
  const T* fh = detail::host_data(f.value(), keep);
  const T* Wh = detail::host_data(W.value(), keep);
  const Shape out_shape{g.batch, g.seq, g.heads, g.v_dim};
  // the state entering each chunk, kept for the backward only: (batch, heads, chunks, K, V)
  auto states = needs_grad ? std::make_shared<std::vector<T>>(static_cast<std::size_t>(g.batch * g.heads * g.chunks() * g.k_dim * g.v_dim))
                           : nullptr;
  T* st = states ? states->data() : nullptr;
  Tensor<T, B> y;
  if constexpr (B::host_accessible) {
    y = Tensor<T, B>(out_shape);
    m2rnn_reference::forward_host<T>(g, docs.doc_ids_host.data(), qh, kh, vh, fh, Wh, y.data(), st);
  } else {
    std::vector<T> yh(static_cast<std::size_t>(out_shape.numel()));
    m2rnn_reference::forward_host<T>(g, docs.doc_ids_host.data(), qh, kh, vh, fh, Wh, yh.data(), st);
    y = Tensor<T, B>::from_host(out_shape, yh);
  }
  if (!needs_grad) return Var<T, B>(std::move(y));
  return make_result("m2rnn_recurrence", std::move(y), [q, k, v, f, W, docs, g, states](const Tensor<T, B>& dy) {
    std::vector<std::vector<T>> held;
    held.reserve(6);
    const T* qh = detail::host_data(q.value(), held);
    const T* kh = detail::host_data(k.value(), held);
    const T* vh = detail::host_data(v.value(), held);
    const T* fh = detail::host_data(f.value(), held);
    const T* Wh = detail::host_data(W.value(), held);
    const T* dyh = detail::host_data(dy, held);
    std::vector<T> dq(static_cast<std::size_t>(q.shape().numel())), dk(dq.size()),
        dv(static_cast<std::size_t>(v.shape().numel())), df(static_cast<std::size_t>(f.shape().numel())),
        dW(static_cast<std::size_t>(W.shape().numel()));
    m2rnn_reference::backward_host<T>(g, docs.doc_ids_host.data(), qh, kh, vh, fh, Wh, states->data(), dyh, dq.data(),
                                      dk.data(), dv.data(), df.data(), dW.data());
    if (q.requires_grad()) detail::add_host_gradient(q, dq);
    if (k.requires_grad()) detail::add_host_gradient(k, dk);
    if (v.requires_grad()) detail::add_host_gradient(v, dv);
    if (f.requires_grad()) detail::add_host_gradient(f, df);
    if (W.requires_grad()) detail::add_host_gradient(W, dW);
  }, q, k, v, f, W);
}

}  // namespace megacpp
