// Kernel cases of the FusedAttention contract (megacpp/core/kernels/attention.hpp), reached through
// flash_attention; the reference is dense_attention (megacpp/nn/attention/dense_reference.hpp),
// built from separately gradient-checked autograd ops, so its gradients are independent of the
// fused kernel's hand-written backward. Part of tests/support/kernel_cases.hpp.
#pragma once

#include <vector>

#include "support/kernel_case.hpp"
#include "support/packed_documents.hpp"

#include "megacpp/nn/attention/dense_reference.hpp"
#include "megacpp/nn/attention/flash_attention.hpp"

namespace megacpp::testing {

template <>
struct KernelCases<kernels::FusedAttention> {
  static constexpr bool specialised = true;
  static constexpr const char* reference = "dense_attention";

  // The fused kernel sums scores tile by tile with an online softmax, the reference with a
  // materialised one: their roundings differ by a few ulps of each output's scale. Worst measured
  // over these cases (GCC 12, AVX-512): 3.7e-7 in float, 5.6e-16 in double; the bounds leave
  // ~10x and ~100x of room for other instruction sets and FMA contraction.
  static constexpr Tolerance kTolerance{5e-6, 1e-13};

  template <class T, Backend B>
  static std::vector<KernelCase<T, B>> cases() {
    using H = Harness<T, B>;
    return {
        // Row 0 starts mid-document (3 tokens before its first BOS) and holds two 1-token
        // documents; with tiles of 4 rows (2 tokens x 2 heads) by 3 keys the 5-, 6- and
        // 7-token documents span several tiles each way. head_dim 2 keeps the finite
        // differences cheap (their cost grows with the square of the input size).
        {"GQA 4 heads : 2 kv heads, causal; row starting mid-document, 1-token documents, documents longer than "
         "a tile",
         [](H& h) {
           return problem(h, packed_layout<B>({{-3, 5, 1, 1, 4}, {1, 7, 6}}, kBos), 4, 2, 2, {0.0, 0.0, 0, {4, 3}});
         },
         kTolerance, true},
        {"softcap 2, window 3, scale 0.7, GQA 2 : 1 (2 query heads share a kv head)",
         [](H& h) {
           return problem(h, packed_layout<B>({{-2, 4, 1, 5}, {6, 6}}, kBos), 2, 1, 4, {0.7, 2.0, 3, {4, 3}});
         },
         kTolerance, true},
        // Tokens in no span (0, 5 and 9) are padding: they see nothing, nobody sees them, their
        // outputs and gradients are 0 (a fully masked softmax row is 0, not NaN).
        {"padding between documents (a layout from spans), softcap 30, no GQA",
         [](H& h) {
           return problem(h, DocumentLayout<B>::from_spans(1, 10, {{{1, 4}, {6, 3}}}), 2, 2, 4,
                          {0.0, 30.0, 0, {4, 3}});
         },
         kTolerance, true},
        // The kernel's default tiles (CPU: 128 rows, 256 keys): a 260-token document spans two
        // key tiles and several query tiles, beside a 1-token document and a mid-document start.
        {"default tiles: a 260-token document, window 70, softcap 50, GQA 2 : 1",
         [](H& h) {
           return problem(h, packed_layout<B>({{-20, 1, 260, 19}}, kBos), 2, 1, 8, {0.0, 50.0, 70, {}});
         },
         kTolerance, false},
    };
  }

 private:
  static constexpr std::int32_t kBos = 0;

  // q (batch, seq, heads, head_dim), k and v (batch, seq, kv_heads, head_dim), uniform in [-1, 1).
  template <class T, Backend B>
  static KernelProblem<T, B> problem(Harness<T, B>& h, DocumentLayout<B> docs, index_t heads, index_t kv_heads,
                                     index_t head_dim, AttentionOptions options) {
    using V = Var<T, B>;
    const index_t batch = docs.batch, seq = docs.seq;
    std::vector<V> inputs{h.param({batch, seq, heads, head_dim}), h.param({batch, seq, kv_heads, head_dim}),
                          h.param({batch, seq, kv_heads, head_dim})};
    auto fused = [docs, options](const std::vector<V>& in) { return flash_attention(in[0], in[1], in[2], docs, options); };
    auto dense = [docs, options](const std::vector<V>& in) { return dense_attention(in[0], in[1], in[2], docs, options); };
    return {std::move(inputs), fused, autograd_reference<T, B>(dense)};
  }
};

}  // namespace megacpp::testing
