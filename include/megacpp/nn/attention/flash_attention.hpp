// megacpp/nn/attention/flash_attention.hpp: the fused attention op, one graph node with a
// hand-written backward (FlashAttention-2: the forward keeps only O and the per-query
// log-sum-exp; the backward recomputes the probabilities from them).
//
//   o = softmax(mask(softcap(scale * q k^T))) v      per head, GQA, document/causal/window mask
//
// q (batch, seq, heads, head_dim), k and v (batch, seq, kv_heads, head_dim) -> o like q.
// The work runs in the backend's kernels::FusedAttention<B> (contract:
// megacpp/core/kernels/attention.hpp). Memory kept for the backward: O and LSE, i.e.
// O(seq * heads * head_dim), and what the backend keeps (kernels::AttentionSaved: on CUDA with bf16
// products, the bf16 copies of q, k and v); no (seq, seq) matrix exists at any point.
#pragma once

#include <memory>
#include <utility>

#include "megacpp/autograd/function.hpp"
#include "megacpp/autograd/precision.hpp"
#include "megacpp/core/kernels/attention.hpp"

namespace megacpp {

/// Fused attention with document masking: each query sees the keys of its own document, causally,
/// inside the window; tiles outside that are never computed. Gradients flow to q, k and v. When
/// `stats` is given it receives what the forward kernel computed (tiles, score elements, the
/// precision its products ran in). Its products ask for the thread's matmul_precision() as
/// products created now do (autograd/precision.hpp), and its backward asks for the same.
template <class T, Backend B>
Var<T, B> flash_attention(const Var<T, B>& q, const Var<T, B>& k, const Var<T, B>& v, const DocumentLayout<B>& docs,
                          const AttentionOptions& options = {}, AttentionStats* stats = nullptr) {
  using Kernel = kernels::FusedAttention<B>;
  kernels::AttentionParams p =
      kernels::attention_params("flash_attention", q.shape(), k.shape(), v.shape(), docs, options);
  p.products = matmul_precision();
  Tensor<T, B> o(q.shape());                        // (batch, seq, heads, head_dim)
  Tensor<T, B> lse(Shape{p.batch, p.seq, p.heads});  // log-sum-exp of each query's visible scores
  // what the backend keeps for the backward (kernels::AttentionSaved), asked for only when one follows
  const bool backward_follows = grad_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad());
  const auto saved = backward_follows ? std::make_shared<kernels::AttentionSaved>() : nullptr;
  const AttentionStats forward_stats = Kernel::template forward<T>(
      p, docs, {q.value().data(), k.value().data(), v.value().data(), o.data(), lse.data(), saved.get()});
  if (stats) *stats = forward_stats;
  return make_result("flash_attention", o, [q, k, v, o, lse, docs, p, saved](const Tensor<T, B>& grad_o) mutable {
    Kernel::template backward<T>(p, docs,
                                 {q.value().data(), k.value().data(), v.value().data(), o.data(), lse.data(),
                                  grad_o.data(), q.requires_grad() ? q.grad_buffer().data() : nullptr,
                                  k.requires_grad() ? k.grad_buffer().data() : nullptr,
                                  v.requires_grad() ? v.grad_buffer().data() : nullptr, saved.get()});
  }, q, k, v);
}

}  // namespace megacpp
