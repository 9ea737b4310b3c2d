// megacpp/nn/m2rnn/recurrence.hpp: the M2RNN recurrence as one graph node, its forward and exact
// backward (BPTT) through the M2RNNScan kernel contract (megacpp/core/kernels/m2rnn_scan.hpp: the
// formulas, the order of every sum, the checkpoints; CPU and CUDA kernels).
//
// M2RNN (Mishra, Tan, Stoica, Gonzalez, Dao; arXiv 2603.14360), per (row, head) with a K x V matrix
// state H and a V x V state weight W:
//
//   Z_t = tanh(H_{t-1} W + k_t v_t^T)      H_t = f_t H_{t-1} + (1 - f_t) Z_t      y_t = H_t^T q_t
//
// H is zero before the first token of every document (docs/masking.md). The forward saves the state
// entering every chunk of `checkpoint_every` tokens, not every H_t; the backward recomputes a
// chunk's states from its checkpoint. Memory: 1 / checkpoint_every of all states, for one more
// forward's work.
#pragma once

#include "megacpp/autograd/function.hpp"
#include "megacpp/autograd/grad_mode.hpp"
#include "megacpp/core/kernels/documents.hpp"
#include "megacpp/core/kernels/m2rnn_scan.hpp"

namespace megacpp {

namespace detail {
inline kernels::M2RNNScanParams check_m2rnn_inputs(const char* who, const Shape& q, const Shape& k, const Shape& v,
                                                   const Shape& f, const Shape& W, index_t doc_batch, index_t doc_seq) {
  check(q.rank() == 4, who, "q must be (batch, seq, heads, K), got ", q);
  kernels::M2RNNScanParams p{q[0], q[1], q[2], q[3], 0, 0, 64};
  check(v.rank() == 4 && v[0] == p.batch && v[1] == p.seq && v[2] == p.heads, who, "v must be (", p.batch, ", ", p.seq,
        ", ", p.heads, ", V), got ", v);
  p.v_dim = v[3];
  check(k == q, who, "k ", k, " must have q's shape ", q);
  check(f == Shape{p.batch, p.seq, p.heads}, who, "f must be (", p.batch, ", ", p.seq, ", ", p.heads, "), got ", f);
  check(W == Shape{p.heads, p.v_dim, p.v_dim}, who, "W must be (", p.heads, ", ", p.v_dim, ", ", p.v_dim, "), got ", W);
  check(doc_batch == p.batch && doc_seq == p.seq, who, "document layout (", doc_batch, ", ", doc_seq,
        ") does not match (batch, seq) = (", p.batch, ", ", p.seq, ")");
  return p;
}
}  // namespace detail

/// The M2RNN recurrence: y (batch, seq, heads, V) = H_t^T q_t per token and head, with the state
/// reset at every document start of `docs`. Differentiable in q, k, v, f and W (exact BPTT unless
/// gradient_clipping > 0); the backward keeps one state per `checkpoint_every` tokens.
template <class T, Backend B>
Var<T, B> m2rnn_recurrence(const Var<T, B>& q, const Var<T, B>& k, const Var<T, B>& v, const Var<T, B>& f,
                           const Var<T, B>& W, const DocumentLayout<B>& docs, double gradient_clipping = 0.0,
                           index_t checkpoint_every = 64) {
  kernels::M2RNNScanParams p = detail::check_m2rnn_inputs("m2rnn_recurrence", q.shape(), k.shape(), v.shape(),
                                                          f.shape(), W.shape(), docs.batch, docs.seq);
  p.gradient_clipping = gradient_clipping;
  p.checkpoint_every = checkpoint_every;
  p.validate("m2rnn_recurrence");
  const bool needs_grad = grad_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad() ||
                                             f.requires_grad() || W.requires_grad());
  const kernels::M2RNNScanOperands<T> in{q.value().data(), k.value().data(), v.value().data(), f.value().data(),
                                         W.value().data()};
  Tensor<T, B> y(Shape{p.batch, p.seq, p.heads, p.v_dim});
  // the state entering each chunk, kept for the backward only
  Tensor<T, B> checkpoints;
  if (needs_grad) checkpoints = Tensor<T, B>(Shape{p.batch, p.heads, p.chunks(), p.k_dim, p.v_dim});
  kernels::M2RNNScan<B>::template forward<T>(p, docs, in, y.data(), needs_grad ? checkpoints.data() : nullptr);
  if (!needs_grad) return Var<T, B>(std::move(y));
  return make_result("m2rnn_recurrence", std::move(y), [q, k, v, f, W, docs, p, checkpoints](const Tensor<T, B>& dy) {
    const kernels::M2RNNScanOperands<T> in{q.value().data(), k.value().data(), v.value().data(), f.value().data(),
                                           W.value().data()};
    const auto sink = [](const Var<T, B>& x) { return x.requires_grad() ? x.grad_buffer().data() : nullptr; };
    kernels::M2RNNScan<B>::template backward<T>(p, docs, in, dy.data(), checkpoints.data(),
                                                {sink(q), sink(k), sink(v), sink(f), sink(W)});
  }, q, k, v, f, W);
}

}  // namespace megacpp
