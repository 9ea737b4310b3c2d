// megacpp/nn/model/masking_check.hpp: the document-masking invariant checker (a sibling of
// gradcheck) for any model, for users who run CPU-only correctness tests of their compositions.
//
// docs/recipe.md "Document masking": in a packed row no layer may carry information
// across a document boundary. For every document B of the batch the checker verifies
//   1. isolation, bitwise: replacing every token of the other documents of B's row changes no
//      output of any layer at B's positions;
//   2. gradient, bitwise: d(sum of B's per-token losses) / d(activations of every layer) is
//      exactly 0 at the positions of the other documents;
//   3. packing: each layer's outputs for B packed in the row equal B run alone in a row of its
//      own, within `tolerance` (relative to the layer's scale; 0 demands bitwise). The built-in
//      layers meet 0 on the CPU backend (its GEMM computes a row independently of the rows
//      beside it); the default 1e-6 leaves room for user layers whose kernels do not.
// It reports the first violation: check, layer, row, position, feature and the two values.
//
// The model needs trace(ids, docs) -> per-layer outputs (layer 0 = embedding) and
// per_token_loss_from(last layer output, targets) -> (batch, seq) losses. LM provides both.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "megacpp/autograd/backward.hpp"
#include "megacpp/autograd/ops/elementwise.hpp"
#include "megacpp/autograd/ops/reduce.hpp"
#include "megacpp/core/random.hpp"
#include "megacpp/core/kernels/documents.hpp"

namespace megacpp {

/// What check_document_masking examines.
struct MaskingCheckOptions {
  std::int32_t bos_id = 0;           ///< BOS token: documents start at it
  std::int32_t vocab = 0;            ///< replacement tokens are drawn from [0, vocab) minus BOS
  double packed_tolerance = 1e-6;    ///< check 3: max |packed - alone| / (max |alone| + 1e-30) per layer
  bool check_packed_vs_alone = true;
  std::uint64_t seed = 7;            ///< for the replacement tokens
};

/// The outcome: ok, or the first violation in words, plus the worst packed-vs-alone difference.
struct MaskingCheckResult {
  bool ok = true;                      ///< every invariant held
  std::string violation;               ///< empty when ok
  double max_packed_vs_alone = 0;      ///< largest relative difference seen in check 3
  std::size_t documents_checked = 0;   ///< documents examined
  /// Same as ok.
  explicit operator bool() const { return ok; }
};

namespace detail {
template <class T>
bool bits_equal(T a, T b) { return std::memcmp(&a, &b, sizeof(T)) == 0; }
}  // namespace detail

/// Checks the three document-masking invariants of `model` on the packed batch `input_ids`
/// (batch, seq) with next-token `targets`; see the file comment.
template <class Model>
MaskingCheckResult check_document_masking(Model& model, const std::vector<std::int32_t>& input_ids,
                                          const std::vector<std::int32_t>& targets, index_t batch, index_t seq,
                                          const MaskingCheckOptions& opt) {
  using T = typename Model::value_type;
  using B = typename Model::backend_type;
  using Ids = Tensor<std::int32_t, B>;
  check(opt.vocab > 1, "check_document_masking", "options.vocab must be set (> 1)");
  MaskingCheckResult result;
  const DocumentLayout<B> docs = DocumentLayout<B>::from_tokens(input_ids, batch, seq, opt.bos_id);
  const Ids ids = Ids::from_host(Shape{batch, seq}, input_ids);
  const Ids tgt = Ids::from_host(Shape{batch, seq}, targets);
  std::vector<std::vector<T>> base;
  {
    NoGrad no_grad;
    for (const auto& v : model.trace(ids, docs)) base.push_back(v.value().to_host());
  }
  const index_t layers = static_cast<index_t>(base.size());
  const index_t width = base[0].size() / static_cast<std::size_t>(batch * seq);
  Rng rng(opt.seed);
  auto fail_at = [&](const std::string& what, index_t layer, index_t b, index_t t, index_t f, double x, double y) {
    std::ostringstream os;
    os << what << ": layer " << layer << " (0 = embedding), row " << b << ", position " << t << ", feature " << f
       << ": " << x << " vs " << y;
    result.ok = false;
    result.violation = os.str();
    return result;
  };

  for (index_t b = 0; b < batch; ++b) {
    for (const DocumentSpan& doc : docs.spans[static_cast<std::size_t>(b)]) {
      ++result.documents_checked;
      auto in_doc = [&](index_t t) { return t >= doc.start && t < doc.start + doc.length; };
      // 1. isolation: perturb every other document of the row (BOS stays BOS: same layout).
      std::vector<std::int32_t> perturbed = input_ids;
      for (index_t t = 0; t < seq; ++t) {
        std::int32_t& tok = perturbed[b * seq + t];
        if (in_doc(t) || tok == opt.bos_id) continue;
        std::int32_t r;
        do r = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(opt.vocab)));
        while (r == opt.bos_id || r == tok);
        tok = r;
      }
      {
        NoGrad no_grad;
        const auto outs = model.trace(Ids::from_host(Shape{batch, seq}, perturbed), docs);
        for (index_t l = 0; l < layers; ++l) {
          const auto v = outs[l].value().to_host();
          for (index_t t = doc.start; t < doc.start + doc.length; ++t)
            for (index_t f = 0; f < width; ++f) {
              const std::size_t i = static_cast<std::size_t>((b * seq + t) * width + f);
              if (!detail::bits_equal(v[i], base[l][i]))
                return fail_at("changing another document changed this one", l, b, t, f, base[l][i], v[i]);
            }
        }
      }
      // 2. gradient: loss on this document only; every activation elsewhere in the row gets 0.
      {
        auto outs = model.trace(ids, docs);
        for (auto& o : outs) o.retain_grad();
        std::vector<T> select(static_cast<std::size_t>(batch * seq), T(0));
        for (index_t t = doc.start; t < doc.start + doc.length; ++t) select[b * seq + t] = T(1);
        const Var<T, B> losses = model.per_token_loss_from(outs.back(), tgt);  // (batch, seq)
        backward(sum(mul(losses, Var<T, B>(Tensor<T, B>::from_host(Shape{batch, seq}, select)))));
        for (index_t l = 0; l < layers; ++l) {
          if (!outs[l].grad().defined()) continue;
          const auto g = outs[l].grad().to_host();
          for (index_t t = 0; t < seq; ++t) {
            if (in_doc(t)) continue;
            for (index_t f = 0; f < width; ++f) {
              const T gv = g[static_cast<std::size_t>((b * seq + t) * width + f)];
              if (gv != T(0)) return fail_at("gradient leaked to another document", l, b, t, f, 0.0, gv);
            }
          }
        }
      }
      // 3. packed vs alone: the document in a row of its own, positions restarting as packed.
      if (opt.check_packed_vs_alone) {
        std::vector<std::int32_t> alone(input_ids.begin() + b * seq + doc.start,
                                        input_ids.begin() + b * seq + doc.start + doc.length);
        const DocumentLayout<B> alone_docs = DocumentLayout<B>::from_tokens(alone, 1, doc.length, opt.bos_id);
        NoGrad no_grad;
        const auto outs = model.trace(Ids::from_host(Shape{1, doc.length}, alone), alone_docs);
        for (index_t l = 0; l < layers; ++l) {
          const auto v = outs[l].value().to_host();
          double scale = 0, worst = 0;
          index_t worst_t = 0, worst_f = 0;
          for (index_t t = 0; t < doc.length; ++t)
            for (index_t f = 0; f < width; ++f) {
              const double a = v[static_cast<std::size_t>(t * width + f)];
              const double p = base[l][static_cast<std::size_t>((b * seq + doc.start + t) * width + f)];
              scale = std::max(scale, std::abs(a));
              if (std::abs(a - p) > worst) {
                worst = std::abs(a - p);
                worst_t = t;
                worst_f = f;
              }
            }
          const double rel = worst / (scale + 1e-30);
          result.max_packed_vs_alone = std::max(result.max_packed_vs_alone, rel);
          if (rel > opt.packed_tolerance) {
            const std::size_t i = static_cast<std::size_t>((b * seq + doc.start + worst_t) * width + worst_f);
            return fail_at("packed differs from alone beyond tolerance", l, b, doc.start + worst_t, worst_f, base[l][i],
                           v[static_cast<std::size_t>(worst_t * width + worst_f)]);
          }
        }
      }
    }
  }
  return result;
}

}  // namespace megacpp
