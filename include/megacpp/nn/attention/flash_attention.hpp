// megacpp/nn/attention/flash_attention.hpp: the fused attention op, one graph node with a
// hand-written backward (FlashAttention-2: the forward keeps only O and the per-query
// log-sum-exp; the backward recomputes the probabilities from them).
//
//   o = softmax(mask(softcap(scale * q k^T))) v      per head, GQA, document/causal/window mask
//
// q (batch, seq, heads, head_dim), k and v (batch, seq, kv_heads, head_dim) -> o like q.
// The work runs in the backend's FusedAttention<B> kernel (contract: nn/attention/kernel.hpp;
// CPU: <megacpp/backends/cpu/attention.hpp>). Memory kept for the backward: O and LSE, i.e.
// O(seq * heads * head_dim); no (seq, seq) matrix exists at any point.
#pragma once

#include <utility>

#include "megacpp/autograd/function.hpp"
#include "megacpp/nn/attention/kernel.hpp"

namespace megacpp {

/// Fused attention with document masking: each query sees the keys of its own document, causally,
/// inside the window; tiles outside that are never computed. Gradients flow to q, k and v.
template <class T, Backend B>
Var<T, B> flash_attention(const Var<T, B>& q, const Var<T, B>& k, const Var<T, B>& v, const DocumentLayout<B>& docs,
                          const AttentionOptions& options = {}) {
  const AttentionParams p = detail::attention_params("flash_attention", q.shape(), k.shape(), v.shape(), docs, options);
  Tensor<T, B> o(q.shape());                        // (batch, seq, heads, head_dim)
  Tensor<T, B> lse(Shape{p.batch, p.seq, p.heads});  // log-sum-exp of each query's visible scores
  FusedAttention<B>::template forward<T>(p, docs, q.value().data(), k.value().data(), v.value().data(), o.data(),
                                         lse.data());
  return make_result("flash_attention", o, [q, k, v, o, lse, docs, p](const Tensor<T, B>& grad_o) mutable {
    T* dq = q.requires_grad() ? q.grad_buffer().data() : nullptr;
    T* dk = k.requires_grad() ? k.grad_buffer().data() : nullptr;
    T* dv = v.requires_grad() ? v.grad_buffer().data() : nullptr;
    FusedAttention<B>::template backward<T>(p, docs, q.value().data(), k.value().data(), v.value().data(), o.data(),
                                            lse.data(), grad_o.data(), dq, dk, dv);
  }, q, k, v);
}

}  // namespace megacpp
