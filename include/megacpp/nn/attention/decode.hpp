// megacpp/nn/attention/decode.hpp: the attention KV cache of Attention::step, the attention
// counterpart of megacpp/nn/mamba/decode.hpp. The step's attention itself is the DecodeAttention
// kernel contract (megacpp/core/kernels/attention_decode.hpp): the cache stays in backend memory.
//
// Decoding feeds one token per row at a time. Everything the next token needs from the past is
// the rotated keys and the values of the earlier tokens of its own document, so the cache holds,
// per row, exactly those (RoPE is applied before caching: a key's rotation depends only on its own
// position, so cached keys never need re-rotating):
//   k, v      (batch, capacity, kv_heads, head_dim)   token at document position p in slot p % capacity
//   length    tokens of the current document held (at most capacity)
//   position  document position of the next token (RoPE angle and window arithmetic)
// Document masking (docs/recipe.md): a token whose row has new_document set is the first of a new
// document: that row is reset (length 0, position 0) before the token is added, so it sees only
// itself, as the training kernel's per-document tiles do. A fresh cache is at position 0, which
// matches DocumentLayout numbering tokens before a row's first BOS from 0 as document 0.
//
// One step for query token i (document position i) sees the keys j <= i of its document with
// i - j < window (window > 0), under the FusedAttention contract's score rule. With a sliding
// window only the last `window` keys are visible, so the cache needs only `window` slots: it is a
// ring buffer and never overflows. Without a window, a document longer than the capacity is an
// error naming the capacity.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "megacpp/core/tensor.hpp"
#include "megacpp/core/kernels/attention.hpp"
#include "megacpp/core/kernels/attention_decode.hpp"
#include "megacpp/nn/cache_shape.hpp"

namespace megacpp {

/// Attention decode cache: per row, the rotated keys and the values of the current document.
template <class T, Backend B>
struct AttentionCache {
  Tensor<T, B> k;                 ///< (batch, capacity, kv_heads, head_dim): rotated keys, slot = position % capacity
  Tensor<T, B> v;                 ///< (batch, capacity, kv_heads, head_dim): values, same slots
  std::vector<index_t> length;    ///< per row, tokens of the current document held (<= capacity)
  std::vector<index_t> position;  ///< per row, document position of the next token (0: a new document)

  /// An empty cache: every row at the start of a document.
  static AttentionCache zeros(index_t batch, index_t capacity, index_t kv_heads, index_t head_dim) {
    check(batch > 0 && capacity > 0, "AttentionCache", "batch and capacity must be positive, got batch ", batch,
          ", capacity ", capacity);
    const Shape shape{batch, capacity, kv_heads, head_dim};
    return {Tensor<T, B>::zeros(shape), Tensor<T, B>::zeros(shape), std::vector<index_t>(static_cast<std::size_t>(batch), 0),
            std::vector<index_t>(static_cast<std::size_t>(batch), 0)};
  }
  /// Rows the cache holds.
  index_t batch() const { return k.defined() ? k.shape()[0] : 0; }
  /// Token slots per row.
  index_t capacity() const { return k.defined() ? k.shape()[1] : 0; }
  /// Starts a new document in `row`: nothing of the past stays visible. The old keys and values
  /// stay in their slots: a step reads only the slots of the keys its row sees (DecodeRow), each
  /// written since the reset.
  void reset(index_t row) {
    check(row >= 0 && row < batch(), "AttentionCache::reset", "row ", row, " out of range for batch ", batch());
    length[static_cast<std::size_t>(row)] = 0;
    position[static_cast<std::size_t>(row)] = 0;
  }
};

namespace detail {

// Throws unless every row has room for one more token. A row wraps around (ring buffer) only
// when the window guarantees the overwritten key is no longer visible: window <= capacity.
template <class T, Backend B>
void check_cache_room(const char* who, const AttentionCache<T, B>& cache, index_t window) {
  const bool ring = window > 0 && window <= cache.capacity();
  for (index_t b = 0; b < cache.batch(); ++b)
    check(ring || cache.length[static_cast<std::size_t>(b)] < cache.capacity(), who, "row ", b, " already holds ",
          cache.length[static_cast<std::size_t>(b)], " tokens of its document, the cache's capacity ", cache.capacity(),
          ": make the cache with a larger capacity (make_cache(batch, capacity)) or start a new document");
}

// One decode step of attention for every row: q (batch, 1, H, D), k_new and v_new (batch, 1, Hkv, D),
// backend tensors, the new tokens rotated (and QK-normed). Each row's token goes into its cache
// slot and the row's counters move on; returns o (batch, 1, H * D). The attention is
// kernels::DecodeAttention<B>::step, on the cache's own memory.
template <class T, Backend B>
Tensor<T, B> attend_one_step(AttentionCache<T, B>& cache, const AttentionOptions& opt, index_t window, index_t heads,
                             const Tensor<T, B>& q, const Tensor<T, B>& k_new, const Tensor<T, B>& v_new) {
  const index_t batch = cache.batch(), slots = cache.capacity(), Hkv = cache.k.shape()[2], D = cache.k.shape()[3];
  const auto p = kernels::AttentionDecodeParams::of("Attention::step", batch, heads, Hkv, D, slots, opt);
  std::vector<kernels::DecodeRow> rows(static_cast<std::size_t>(batch));
  for (index_t b = 0; b < batch; ++b) {
    const auto bi = static_cast<std::size_t>(b);
    rows[bi] = kernels::decode_row(cache.length[bi], cache.position[bi], slots, window);
  }
  kernels::check_decode_rows("Attention::step", p, rows.data());
  Tensor<T, B> o(Shape{batch, 1, heads * D});
  kernels::AttentionDecodeArgs<T> a;
  a.q = q.data();
  a.k_new = k_new.data();
  a.v_new = v_new.data();
  a.k = cache.k.data();
  a.v = cache.v.data();
  a.o = o.data();
  a.rows = rows.data();
  kernels::DecodeAttention<B>::step(p, a);
  for (index_t b = 0; b < batch; ++b) {
    const auto bi = static_cast<std::size_t>(b);
    cache.length[bi] = std::min(cache.length[bi] + 1, slots);
    cache.position[bi] += 1;
  }
  return o;
}

}  // namespace detail
}  // namespace megacpp
