/// \file
/// megacpp/core/kernels/attention_decode.hpp: the DecodeAttention kernel contract, one decode step
/// of attention over a KV cache (the cache and its counters: megacpp/nn/attention/decode.hpp).
///
/// Decoding feeds one token per row. Row b's new token sits at document position i and sees the
/// keys of positions [i - n + 1, i] of its own document, n = DecodeRow::visible: the cache holds
/// the earlier ones, in slot position % slots (a ring buffer when a window bounds what is
/// visible), and the new token's own key and value come with the call. Per query head h, reading
/// kv head h / (heads / kv_heads), the FusedAttention contract's score rule
/// (megacpp/core/kernels/attention.hpp; Dao, "FlashAttention-2", arXiv:2307.08691, for the
/// softmax; Gemma 2, arXiv:2408.00118, for the cap):
///
///   s_j = scale * q . k_j;   s_j = cap * tanh(s_j / cap) when cap > 0
///   p_j = exp(s_j - max_j s_j) / sum_j exp(s_j - max_j s_j);   o = sum_j p_j v_j   (j oldest first)
///
/// The step writes the new key and value into slot i % slots, then attends. Scores, softmax and
/// the weighted sum run in double on every backend, each output a function of its own row's cache
/// only, summed in key order: the training kernel's float rounding is then the only difference
/// between decoding a document and its full forward, and decoding keeps the document-masking
/// invariant (docs/recipe.md). The step keeps no state: the caller owns the counters and moves
/// them on (decode_row below gives a row's numbers from them).
#pragma once

#include <cmath>

#include "megacpp/core/config.hpp"
#include "megacpp/core/error.hpp"
#include "megacpp/core/kernels/attention.hpp"
#include "megacpp/core/kernels/kernel.hpp"

namespace megacpp::kernels {

/// The sizes and score options of one decode step.
struct AttentionDecodeParams {
  index_t batch = 0;     ///< rows, one new token each
  index_t heads = 0;     ///< query heads
  index_t kv_heads = 0;  ///< key/value heads (divides heads)
  index_t head_dim = 0;  ///< features per head
  index_t slots = 0;     ///< cache slots per row
  double scale = 1.0;    ///< the resolved score scale (AttentionOptions' 0 already made 1 / sqrt(head_dim))
  double softcap = 0.0;  ///< s = softcap * tanh(s / softcap) when > 0; 0: none

  /// Query heads per kv head.
  MEGACPP_HD index_t group() const { return heads / kv_heads; }

  /// A step's parameters from its sizes and the layer's options, the score scale resolved as the
  /// FusedAttention contract resolves it (resolved_scale); validated, errors naming `op`.
  static AttentionDecodeParams of(const char* op, index_t batch, index_t heads, index_t kv_heads, index_t head_dim,
                                  index_t slots, const AttentionOptions& opt) {
    const AttentionDecodeParams p{batch, heads, kv_heads, head_dim, slots, resolved_scale(opt, head_dim), opt.softcap};
    p.validate(op);
    return p;
  }

  /// Throws unless the sizes are positive, kv_heads divides heads and scale is finite and non-zero.
  void validate(const char* op) const {
    check(batch > 0 && heads > 0 && kv_heads > 0 && head_dim > 0 && slots > 0, op,
          "batch, heads, kv_heads, head_dim and slots must be positive, got ", batch, ", ", heads, ", ", kv_heads, ", ",
          head_dim, ", ", slots);
    check(heads % kv_heads == 0, op, "kv_heads (", kv_heads, ") must divide heads (", heads, ")");
    check(scale != 0.0 && std::isfinite(scale) && softcap >= 0.0, op,
          "scale must be finite and non-zero and softcap >= 0, got scale ", scale, ", softcap ", softcap);
  }
};

/// Where row b's new token goes and which keys it sees.
struct DecodeRow {
  index_t position = 0;  ///< document position i of the new token; its slot is i % slots
  index_t visible = 1;   ///< keys it sees, itself included: positions [i - visible + 1, i] (1 <= visible <= slots)
};

/// Row b's numbers from its cache counters before the step: `length` tokens of the document held,
/// `position` the new token's, and the window (0: none). The caller then moves the counters on:
/// length' = min(length + 1, slots), position' = position + 1.
MEGACPP_HD DecodeRow decode_row(index_t length, index_t position, index_t slots, index_t window) {
  const index_t held = length + 1 < slots ? length + 1 : slots;  // the document's tokens in the cache after this one
  return {position, window > 0 && window < held ? window : held};
}

/// The data of one step: backend memory, but `rows`, which is host memory.
template <class T>
struct AttentionDecodeArgs {
  const T* q = nullptr;      ///< (batch, heads, head_dim): the new tokens' queries
  const T* k_new = nullptr;  ///< (batch, kv_heads, head_dim): their keys
  const T* v_new = nullptr;  ///< (batch, kv_heads, head_dim): their values
  T* k = nullptr;            ///< (batch, slots, kv_heads, head_dim): the cache's keys; the new ones written
  T* v = nullptr;            ///< (batch, slots, kv_heads, head_dim): its values, likewise
  T* o = nullptr;            ///< (batch, heads, head_dim): written
  const DecodeRow* rows = nullptr;  ///< host memory, batch entries
};

/// Throws unless every row's numbers fit the cache: position >= 0, 1 <= visible <= slots and
/// visible <= position + 1 (no key before the document's first token).
inline void check_decode_rows(const char* op, const AttentionDecodeParams& p, const DecodeRow* rows) {
  for (index_t b = 0; b < p.batch; ++b)
    check(rows[b].position >= 0 && rows[b].visible >= 1 && rows[b].visible <= p.slots &&
              rows[b].visible <= rows[b].position + 1,
          op, "row ", b, ": position ", rows[b].position, " with ", rows[b].visible, " visible keys does not fit ",
          p.slots, " cache slots");
}

/// The decode-step attention of backend B (contract: this file); CPU:
/// megacpp/backends/cpu/detail/attention/decode.hpp.
template <class B>
struct DecodeAttention {
  static constexpr bool available = false;  ///< B has no decode-step attention
  /// Writes each row's new key and value into its cache slot, then o.
  template <class T>
  static void step(const AttentionDecodeParams&, const AttentionDecodeArgs<T>&) {
    require<DecodeAttention>();
  }
};

}  // namespace megacpp::kernels
