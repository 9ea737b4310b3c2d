// megacpp/nn/attention/kernel.hpp: the contract between the attention op and a backend's fused
// attention kernel, and the checks every caller runs before reaching a kernel.
//
// Why here and not in core/backend.hpp: the Backend concept is the contract every backend must
// meet today; a fused attention kernel is an optional extension a backend opts into by
// specialising `FusedAttention<B>` (the CPU backend does so in
// <megacpp/backends/cpu/attention.hpp>). A backend without one fails at compile time with a
// message saying what to include or implement, not 40 lines of template errors.
//
// Shapes (row-major, contiguous):
//   q (batch, seq, heads, head_dim)      k, v (batch, seq, kv_heads, head_dim)
//   o (batch, seq, heads, head_dim)      lse (batch, seq, heads): log-sum-exp of each query's scores
// GQA: query head h reads kv head h / (heads / kv_heads) (RECIPE.md "Architecture floor").
// Scores: s = scale * q.k; s = softcap * tanh(s / softcap) when softcap > 0; then the document /
// causal / window mask (nn/attention/tiling.hpp); then softmax over visible keys.
// Tokens covered by no DocumentSpan of their row are padding: they see nothing and nobody sees
// them; their output is 0 (a fully masked row gives 0, never NaN) and their gradients are 0.
#pragma once

#include <cmath>
#include <string>
#include <type_traits>

#include "megacpp/core/error.hpp"
#include "megacpp/core/shape.hpp"
#include "megacpp/nn/documents.hpp"

namespace megacpp {

/// Score options shared by the fused kernel and the dense reference.
struct AttentionOptions {
  double scale = 0.0;    ///< s = scale * q.k; 0 means 1 / sqrt(head_dim)
  double softcap = 0.0;  ///< s = softcap * tanh(s / softcap) when > 0 (Gemma 2); 0: no soft-capping
  index_t window = 0;    ///< sliding window in tokens: key j visible from query i iff i - j < window; 0: none
};

/// Everything a fused attention kernel needs besides the data pointers and the documents.
struct AttentionParams {
  index_t batch = 0;     ///< rows of the packed batch
  index_t seq = 0;       ///< tokens per row
  index_t heads = 0;     ///< query heads
  index_t kv_heads = 0;  ///< key/value heads (divides heads)
  index_t head_dim = 0;  ///< features per head
  double scale = 1.0;    ///< resolved score scale (never 0)
  double softcap = 0.0;  ///< 0: none
  index_t window = 0;    ///< 0: none
  /// Query heads per kv head.
  index_t group() const { return heads / kv_heads; }
};

/// A backend's fused attention kernel. Specialisations provide
///
///     template <class T> static void forward(const AttentionParams&, const DocumentLayout<B>&,
///                                            const T* q, const T* k, const T* v, T* o, T* lse);
///     template <class T> static void backward(const AttentionParams&, const DocumentLayout<B>&,
///                                             const T* q, const T* k, const T* v, const T* o,
///                                             const T* lse, const T* grad_o,
///                                             T* grad_q, T* grad_k, T* grad_v);
///
/// forward overwrites o and lse; backward adds into grad_q, grad_k, grad_v (each may be null:
/// not needed). Both must never materialise a (seq, seq) matrix.
template <Backend B>
struct FusedAttention {
  static_assert(sizeof(B) == 0,
                "megacpp_no_fused_attention_for_backend: include <megacpp/backends/cpu/attention.hpp> (or "
                "<megacpp/nn/attention.hpp>) for Cpu, or specialise megacpp::FusedAttention<YourBackend> "
                "with forward/backward as documented in megacpp/nn/attention/kernel.hpp");
};

namespace detail {

/// Throws unless every row's spans are sorted, non-empty, non-overlapping and inside [0, seq).
template <Backend B>
void check_document_spans(const std::string& op, const DocumentLayout<B>& docs) {
  check(static_cast<index_t>(docs.spans.size()) == docs.batch, op, "documents hold spans for ",
        docs.spans.size(), " rows, layout has batch ", docs.batch);
  for (index_t b = 0; b < docs.batch; ++b) {
    index_t end = 0;
    for (const DocumentSpan& s : docs.spans[static_cast<std::size_t>(b)]) {
      check(s.length > 0 && s.start >= end && s.start + s.length <= docs.seq, op, "row ", b,
            ": document span [", s.start, ", ", s.start + s.length, ") is empty, overlaps the previous one (ending at ",
            end, ") or leaves [0, ", docs.seq, ")");
      end = s.start + s.length;
    }
  }
}

/// Validates q (B, T, H, D), k and v (B, T, Hkv, D) against each other and the documents, and
/// resolves the options into kernel parameters. Errors name the op and carry the shapes.
template <Backend B>
AttentionParams attention_params(const std::string& op, const Shape& q, const Shape& k, const Shape& v,
                                 const DocumentLayout<B>& docs, const AttentionOptions& opt) {
  check(q.rank() == 4, op, "q must be (batch, seq, heads, head_dim), got ", q);
  check(k.rank() == 4 && k == v, op, "k and v must both be (batch, seq, kv_heads, head_dim), got k ", k, ", v ", v);
  check(k[0] == q[0] && k[1] == q[1] && k[3] == q[3], op, "k ", k, " does not match q ", q,
        " in batch, seq or head_dim");
  check(q[2] > 0 && k[2] > 0 && q[3] > 0, op, "heads, kv_heads and head_dim must be positive: q ", q, ", k ", k);
  check(q[2] % k[2] == 0, op, "query heads ", q[2], " are not a multiple of kv heads ", k[2],
        " (GQA: query head h reads kv head h / (heads / kv_heads))");
  docs.check_matches(op, q[0], q[1]);
  check_document_spans(op, docs);
  check(opt.scale >= 0 && std::isfinite(opt.scale), op, "scale must be finite and >= 0 (0: 1/sqrt(head_dim)), got ", opt.scale);
  check(opt.softcap >= 0 && std::isfinite(opt.softcap), op, "softcap must be finite and >= 0 (0: none), got ", opt.softcap);
  check(opt.window >= 0, op, "window must be >= 0 tokens (0: none), got ", opt.window);
  AttentionParams p;
  p.batch = q[0];
  p.seq = q[1];
  p.heads = q[2];
  p.kv_heads = k[2];
  p.head_dim = q[3];
  p.scale = opt.scale > 0 ? opt.scale : 1.0 / std::sqrt(static_cast<double>(q[3]));
  p.softcap = opt.softcap;
  p.window = opt.window;
  return p;
}

}  // namespace detail
}  // namespace megacpp
