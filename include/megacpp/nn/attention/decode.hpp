// megacpp/nn/attention/decode.hpp: the attention KV cache and the host-side kernel of one decode
// step (Attention::step), the attention counterpart of megacpp/nn/mamba/decode.hpp.
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
// One step for query token i (document position i), per head h reading kv head h / (H / Hkv)
// (the FusedAttention contract's score rule, core/kernels/attention.hpp, the same order of operations as the dense reference):
//   s_j = scale * q . k_j                 for the visible keys j: j <= i, and i - j < window (window > 0)
//   s_j = cap * tanh(s_j / cap)           when cap > 0 (Gemma 2)
//   p_j = softmax(s)_j;   o = sum_j p_j v_j
// With a sliding window only the last `window` keys are visible, so the cache needs only
// `window` slots: it is a ring buffer and never overflows. Without a window, a document longer
// than the capacity is an error naming the capacity.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "megacpp/core/tensor.hpp"
#include "megacpp/core/kernels/attention.hpp"
#include "megacpp/nn/host_view.hpp"

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
  /// Starts a new document in `row`: nothing of the past stays visible.
  void reset(index_t row) {
    check(row >= 0 && row < batch(), "AttentionCache::reset", "row ", row, " out of range for batch ", batch());
    for (Tensor<T, B>* t : {&k, &v}) {
      Tensor<T, B> r = t->rows(row, row + 1);
      r.fill(T(0));
    }
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

// One decode step of attention on the host, for every row and head:
//   q      (batch, H, D)     the new tokens' queries, rotated (and QK-normed)
//   k_new  (batch, Hkv, D)   their rotated keys;  v_new (batch, Hkv, D) their values
//   k, v   (batch, slots, Hkv, D) the cache's memory; length, position: the cache's counters
//   o      (batch, H, D)     output
// Appends each row's token to its cache (advancing length and position), then attends over the
// visible keys, oldest first. Scores, softcap, softmax and the weighted sum run in double: the
// training kernel's float rounding is then the only difference left.
template <class T>
void attention_decode_step(index_t batch, index_t heads, index_t kv_heads, index_t dim, index_t slots,
                           const AttentionOptions& opt, const T* q, const T* k_new, const T* v_new, T* k, T* v,
                           std::vector<index_t>& length, std::vector<index_t>& position, T* o) {
  const index_t group = heads / kv_heads, row_size = slots * kv_heads * dim;
  const double scale = opt.scale > 0 ? opt.scale : 1.0 / std::sqrt(static_cast<double>(dim));
  std::vector<double> s(static_cast<std::size_t>(slots)), acc(static_cast<std::size_t>(dim));
  for (index_t b = 0; b < batch; ++b) {
    const auto bi = static_cast<std::size_t>(b);
    const index_t i = position[bi], slot = i % slots;
    std::copy_n(k_new + b * kv_heads * dim, kv_heads * dim, k + b * row_size + slot * kv_heads * dim);
    std::copy_n(v_new + b * kv_heads * dim, kv_heads * dim, v + b * row_size + slot * kv_heads * dim);
    length[bi] = std::min(length[bi] + 1, slots);
    position[bi] = i + 1;
    // visible keys: document positions [first, i]; the window keeps i - j < window
    const index_t first = std::max(i - length[bi] + 1, opt.window > 0 ? i - opt.window + 1 : index_t(0));
    const index_t n = i - first + 1;
    for (index_t h = 0; h < heads; ++h) {
      const T* qh = q + (b * heads + h) * dim;
      const index_t kvh = h / group;
      double m = -std::numeric_limits<double>::infinity();
      for (index_t j = 0; j < n; ++j) {
        const T* kj = k + b * row_size + ((first + j) % slots * kv_heads + kvh) * dim;
        double dot = 0;
        for (index_t d = 0; d < dim; ++d) dot += static_cast<double>(qh[d]) * static_cast<double>(kj[d]);
        double sj = scale * dot;
        if (opt.softcap > 0) sj = opt.softcap * std::tanh(sj / opt.softcap);
        s[static_cast<std::size_t>(j)] = sj;
        m = std::max(m, sj);
      }
      double l = 0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (index_t j = 0; j < n; ++j) {
        const double p = std::exp(s[static_cast<std::size_t>(j)] - m);
        l += p;
        const T* vj = v + b * row_size + ((first + j) % slots * kv_heads + kvh) * dim;
        for (index_t d = 0; d < dim; ++d) acc[static_cast<std::size_t>(d)] += p * static_cast<double>(vj[d]);
      }
      T* oh = o + (b * heads + h) * dim;
      for (index_t d = 0; d < dim; ++d) oh[d] = static_cast<T>(acc[static_cast<std::size_t>(d)] / l);
    }
  }
}

}  // namespace detail
}  // namespace megacpp
