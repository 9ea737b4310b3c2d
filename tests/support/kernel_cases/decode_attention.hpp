// Kernel cases of the DecodeAttention contract (megacpp/core/kernels/attention_decode.hpp): a packed
// batch decoded token by token through kernels::DecodeAttention<B>::step, a cache per row reset at
// each document start, against dense_attention (megacpp/nn/attention/dense_reference.hpp) over the
// whole batch at once. The decode steps must reproduce the full forward's causal, same-document,
// windowed attention: the ring buffer, GQA, softcap and scale included. Forward only (decoding has
// no backward), so no gradcheck. Part of tests/support/kernel_cases.hpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "support/kernel_case.hpp"
#include "support/packed_documents.hpp"

#include "megacpp/core/kernels/attention_decode.hpp"
#include "megacpp/nn/attention/dense_reference.hpp"

namespace megacpp::testing {

template <>
struct KernelCases<kernels::DecodeAttention> {
  static constexpr bool specialised = true;
  static constexpr const char* reference = "dense_attention over the whole batch";

  // The steps sum in double and round once; the reference rounds every op in T. Worst measured
  // over these cases (GCC 12, AVX-512): 1e-7 to 3e-7 in float, under 3e-16 in double; the bounds leave
  // ~20x and ~300x of room for other instruction sets and FMA contraction.
  static constexpr Tolerance kTolerance{5e-6, 1e-13};

  template <class T, Backend B>
  static std::vector<KernelCase<T, B>> cases() {
    using H = Harness<T, B>;
    return {
        // Row 0 starts mid-document (3 tokens before its first BOS) and holds two 1-token documents.
        {"GQA 4 heads : 2 kv heads; a row starting mid-document, 1-token documents",
         [](H& h) { return problem(h, packed_layout<B>({{-3, 5, 1, 1, 4}, {1, 7, 6}}, kBos), 4, 2, 2, {}); },
         kTolerance, false},
        // window 3: 3 slots per row, so the 6-token documents wrap the ring buffer twice.
        {"softcap 2, window 3 (a ring buffer of 3 slots), scale 0.7, GQA 2 : 1",
         [](H& h) { return problem(h, packed_layout<B>({{-2, 4, 1, 5}, {6, 6}}, kBos), 2, 1, 4, {0.7, 2.0, 3, {}}); },
         kTolerance, false},
        // More keys than a CUDA block has threads, head_dim 72 (3 key subsets of 72 columns, a
        // partial last warp of columns); a cache of 320 slots, more than the window of 280, so
        // the window, not the ring buffer, hides the oldest keys.
        {"a 300-token document, head_dim 72, window 280 in 320 slots, softcap 30, GQA 2 : 1",
         [](H& h) {
           return problem(h, packed_layout<B>({{-7, 300, 13}}, kBos), 2, 1, 72, {0.0, 30.0, 280, {}}, Slots::whole_row);
         },
         kTolerance, false},
        // head_dim wider than a CUDA block: the output in two column passes.
        {"head_dim 260, no GQA",
         [](H& h) { return problem(h, packed_layout<B>({{5, 3}}, kBos), 2, 2, 260, {}); }, kTolerance, false},
        // More rows than one CUDA launch takes (64): the rows in two launches.
        {"70 rows of 1- and 2-token documents",
         [](H& h) { return problem(h, packed_layout<B>(std::vector<std::vector<index_t>>(70, {2, 1}), kBos), 2, 1, 3, {}); },
         kTolerance, false},
    };
  }

 private:
  static constexpr std::int32_t kBos = 0;

  // Cache slots per row: the window's (a ring buffer, as Attention::make_cache makes) or the row's.
  enum class Slots { window, whole_row };

  // q (batch, seq, heads, head_dim), k and v (batch, seq, kv_heads, head_dim), uniform in [-1, 1).
  template <class T, Backend B>
  static KernelProblem<T, B> problem(Harness<T, B>& h, DocumentLayout<B> docs, index_t heads, index_t kv_heads,
                                     index_t head_dim, AttentionOptions options, Slots slots = Slots::window) {
    using V = Var<T, B>;
    const index_t batch = docs.batch, seq = docs.seq;
    const index_t cache_slots = slots == Slots::window && options.window > 0 ? std::min(seq, options.window) : seq;
    std::vector<V> inputs{h.param({batch, seq, heads, head_dim}), h.param({batch, seq, kv_heads, head_dim}),
                          h.param({batch, seq, kv_heads, head_dim})};
    auto decoded = [docs, options, cache_slots](const std::vector<V>& in) { return decode_all(docs, options, cache_slots, in); };
    auto dense = [docs, options](const std::vector<V>& in) { return dense_attention(in[0], in[1], in[2], docs, options); };
    return {std::move(inputs), decoded, forward_reference<T, B>(dense)};
  }

  // Decodes the batch one token per row at a time: o (batch, seq, heads, head_dim).
  template <class T, Backend B>
  static Var<T, B> decode_all(const DocumentLayout<B>& docs, const AttentionOptions& options, index_t slots,
                              const std::vector<Var<T, B>>& in) {
    const index_t batch = docs.batch, seq = docs.seq, H = in[0].shape()[2], Hkv = in[1].shape()[2],
                  D = in[0].shape()[3];
    const auto p = kernels::AttentionDecodeParams::of("decode_all", batch, H, Hkv, D, slots, options);
    const std::vector<T> q = in[0].value().to_host(), k = in[1].value().to_host(), v = in[2].value().to_host();
    Tensor<T, B> k_cache = Tensor<T, B>::zeros({batch, slots, Hkv, D}), v_cache = Tensor<T, B>::zeros({batch, slots, Hkv, D});
    std::vector<index_t> length(static_cast<std::size_t>(batch), 0), position(static_cast<std::size_t>(batch), 0);
    std::vector<T> out(static_cast<std::size_t>(batch * seq * H * D));
    for (index_t t = 0; t < seq; ++t) {
      std::vector<T> qt, kt, vt;  // token t of every row: (batch, heads or kv_heads, D)
      std::vector<kernels::DecodeRow> rows;
      for (index_t b = 0; b < batch; ++b) {
        const auto bi = static_cast<std::size_t>(b);
        const auto& spans = docs.spans[bi];
        if (std::any_of(spans.begin(), spans.end(), [t](const DocumentSpan& s) { return s.start == t; }))
          length[bi] = position[bi] = 0;  // a new document: nothing before it stays visible
        rows.push_back(kernels::decode_row(length[bi], position[bi], slots, options.window));
        qt.insert(qt.end(), q.begin() + (b * seq + t) * H * D, q.begin() + (b * seq + t + 1) * H * D);
        kt.insert(kt.end(), k.begin() + (b * seq + t) * Hkv * D, k.begin() + (b * seq + t + 1) * Hkv * D);
        vt.insert(vt.end(), v.begin() + (b * seq + t) * Hkv * D, v.begin() + (b * seq + t + 1) * Hkv * D);
        length[bi] = std::min(length[bi] + 1, slots);
        position[bi] += 1;
      }
      kernels::check_decode_rows("decode_all", p, rows.data());
      const auto q_dev = Tensor<T, B>::from_host({batch, H, D}, qt), k_dev = Tensor<T, B>::from_host({batch, Hkv, D}, kt),
                 v_dev = Tensor<T, B>::from_host({batch, Hkv, D}, vt);
      Tensor<T, B> o({batch, H, D});
      kernels::AttentionDecodeArgs<T> a;
      a.q = q_dev.data();
      a.k_new = k_dev.data();
      a.v_new = v_dev.data();
      a.k = k_cache.data();
      a.v = v_cache.data();
      a.o = o.data();
      a.rows = rows.data();
      kernels::DecodeAttention<B>::step(p, a);
      const std::vector<T> ot = o.to_host();
      for (index_t b = 0; b < batch; ++b)
        std::copy_n(ot.begin() + b * H * D, H * D, out.begin() + (b * seq + t) * H * D);
    }
    return Var<T, B>(Tensor<T, B>::from_host({batch, seq, H, D}, out));
  }
};

}  // namespace megacpp::testing
