// megacpp/nn/attention/dense_reference.hpp: attention with materialised (seq, seq) scores, for
// tests and benchmarks only (the naive reference beside the fused kernel, STYLE.md habit 4).
//
// Built from existing autograd ops only (matmul, scale, softcap, add, softmax, transpose, concat),
// so its gradient is the composition of independently gradient-checked ops, not a second copy of
// the fused kernel's hand-written backward. Per batch row b, with heads as the matmul batch:
//   S = scale * Q K^T                (heads, seq, seq); kv head h / group repeated for GQA
//   S = cap * tanh(S / cap)          (when softcap > 0)
//   S = S + M_b                      M_b[i][j] = 0 if allowed(i, j), else -inf
//   P = softmax(S);  O = P V
// allowed(i, j): doc_ids equal (cumsum(input_ids == BOS), docs/recipe.md "Document masking"), j <= i, i - j < window when
// window > 0, and both tokens inside a document span (tokens outside every span are padding).
// A fully masked row has softmax 0, so its output is 0, not NaN.
// Memory: several (heads, seq, seq) tensors per row: never use it in a training path.
#pragma once

#include <cstring>
#include <limits>
#include <vector>

#include "megacpp/autograd/grad_mode.hpp"
#include "megacpp/autograd/ops/elementwise.hpp"
#include "megacpp/autograd/ops/matmul.hpp"
#include "megacpp/autograd/ops/shape.hpp"
#include "megacpp/autograd/ops/softmax.hpp"
#include "megacpp/core/kernels/attention.hpp"
#include "megacpp/core/kernels/attention_tiling.hpp"

namespace megacpp {

/// The dense reference's materialised scores, filled when asked for (`return_scores`).
template <class T, Backend B>
struct DenseAttentionScores {
  Tensor<T, B> scores;         ///< (batch, heads, seq, seq): after scale, softcap and mask (-inf where masked)
  Tensor<T, B> probabilities;  ///< (batch, heads, seq, seq): softmax of `scores` (exactly 0 where masked)
};

/// The additive mask of one batch row: (seq, seq), 0 where query i may see key j, -inf elsewhere.
template <class T, Backend B>
Tensor<T, B> dense_attention_mask(const DocumentLayout<B>& docs, index_t b, index_t window) {
  const index_t seq = docs.seq;
  std::vector<bool> covered(static_cast<std::size_t>(seq), false);
  for (const DocumentSpan& s : docs.spans[static_cast<std::size_t>(b)])
    for (index_t t = s.start; t < s.start + s.length; ++t) covered[static_cast<std::size_t>(t)] = true;
  std::vector<T> mask(static_cast<std::size_t>(seq * seq), -std::numeric_limits<T>::infinity());
  for (index_t i = 0; i < seq; ++i)
    for (index_t j = 0; j < seq; ++j)
      if (covered[static_cast<std::size_t>(i)] && covered[static_cast<std::size_t>(j)] && docs.same_document(b, i, j) &&
          attention::visible(i, j, window))
        mask[static_cast<std::size_t>(i * seq + j)] = T(0);
  return Tensor<T, B>::from_host(Shape{seq, seq}, mask);
}

/// Dense attention with the same inputs, options and result as flash_attention:
/// q (batch, seq, heads, D), k, v (batch, seq, kv_heads, D) -> (batch, seq, heads, D).
/// With `return_scores`, also hands back the masked scores and probabilities.
template <class T, Backend B>
Var<T, B> dense_attention(const Var<T, B>& q, const Var<T, B>& k, const Var<T, B>& v, const DocumentLayout<B>& docs,
                          const AttentionOptions& options = {}, DenseAttentionScores<T, B>* return_scores = nullptr) {
  const kernels::AttentionParams p = kernels::attention_params("dense_attention", q.shape(), k.shape(), v.shape(), docs, options);
  const index_t seq = p.seq, H = p.heads, Hkv = p.kv_heads, D = p.head_dim, g = p.group();
  if (return_scores) {
    return_scores->scores = Tensor<T, B>(Shape{p.batch, H, seq, seq});
    return_scores->probabilities = Tensor<T, B>(Shape{p.batch, H, seq, seq});
  }
  // (1, seq, n, D) row of x -> (n, seq, D)
  auto heads_first = [&](const Var<T, B>& x, index_t b, index_t n) {
    return transpose(reshape(slice(x, 0, b, b + 1), Shape{seq, n, D}), 0, 1);
  };
  // (Hkv, seq, D) -> (H, seq, D): query head h reads kv head h / g.
  auto repeat_kv = [&](const Var<T, B>& x) {
    if (g == 1) return x;
    const Var<T, B> flat = reshape(x, Shape{Hkv, 1, seq * D});
    return reshape(concat(std::vector<Var<T, B>>(static_cast<std::size_t>(g), flat), 1), Shape{H, seq, D});
  };
  std::vector<Var<T, B>> rows;
  for (index_t b = 0; b < p.batch; ++b) {
    const Var<T, B> qb = heads_first(q, b, H);              // (H, T, D)
    const Var<T, B> kb = repeat_kv(heads_first(k, b, Hkv));  // (H, T, D)
    const Var<T, B> vb = repeat_kv(heads_first(v, b, Hkv));  // (H, T, D)
    Var<T, B> s = scale(matmul(qb, kb, false, true), p.scale);  // (H, T, T)
    if (p.softcap > 0) s = softcap(s, p.softcap);
    s = s + Var<T, B>(dense_attention_mask<T, B>(docs, b, p.window));
    const Var<T, B> prob = softmax(s);  // (H, T, T)
    if (return_scores) {
      const std::size_t n = static_cast<std::size_t>(H * seq * seq);
      B::template copy<T>(return_scores->scores.data() + b * H * seq * seq, s.value().data(), n);
      B::template copy<T>(return_scores->probabilities.data() + b * H * seq * seq, prob.value().data(), n);
    }
    const Var<T, B> ob = matmul(prob, vb);                                 // (H, T, D)
    rows.push_back(reshape(transpose(ob, 0, 1), Shape{1, seq, H, D}));       // (1, T, H, D)
  }
  return rows.size() == 1 ? rows[0] : concat(rows, 0);
}

}  // namespace megacpp
