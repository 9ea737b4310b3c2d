// megacpp/data/fim.hpp: fill-in-the-middle documents and the loss mask they imply.
//
// FIM (Bavarian et al. 2022, "Efficient Training of Language Models to Fill in the Middle", arXiv
// 2207.14255), PSM order: a document
//   BOS body EOS   becomes   BOS <PRE> prefix <SUF> suffix <MID> middle EOS
// where body = prefix + middle + suffix. docs/recipe.md ("Fill in the middle"): code documents are
// 40% plain next-token, 40% random FIM (cut points uniform over the body's tokens), 20% structured
// FIM, split evenly between doc -> code (a comment and the signature as prefix, the function body
// as middle) and code -> doc (the comment as middle, the code around it as context); a document
// with no comment-then-function falls back to random FIM. The structured spans are found in the
// text (fim_spans.hpp) and mapped to tokens with the tokenizer's byte offsets.
//
// Loss mask (docs/recipe.md): no target is dropped except the FIM sentinels `<PRE>`, `<SUF>` and
// `<MID>`. Their positions are the pipeline's random choices (whether to rewrite, where to cut),
// which no input predicts, and at inference the prompt supplies them; every token of the prefix,
// suffix and middle and the middle's EOS stays a target. The transform runs when shards are written
// (deterministic in a seed); the mask is derived from the tokens when rows are read.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "megacpp/core/random.hpp"
#include "megacpp/data/tokenizer.hpp"

namespace megacpp::data {

/// How often and how documents are turned into FIM examples. The defaults are the recipe's
/// 40% plain / 40% random FIM / 20% structured FIM; FimConfig::rate_half() is the alternative
/// "FIM at rate 0.5".
struct FimConfig {
  double rate = 0.6;                    ///< probability a document becomes a FIM example
  double structured_share = 1.0 / 3.0;  ///< of FIM examples, the share split at a comment and a function body
  double code_to_doc_share = 0.5;       ///< of structured examples, the share whose middle is the comment

  /// The recipe's default: 40% plain, 40% random FIM, 20% structured FIM (10% doc -> code, 10% code -> doc).
  static FimConfig recipe() { return {}; }
  /// "FIM at rate 0.5": half of the documents become FIM examples, with the same structured share
  /// (50% plain, 33.3% random, 16.7% structured).
  static FimConfig rate_half() { return {0.5, 1.0 / 3.0, 0.5}; }
};

/// What fim_transform did to a document.
enum class FimKind : std::uint8_t {
  plain,        ///< left as it was (next-token prediction)
  random,       ///< PSM with uniform cut points
  doc_to_code,  ///< structured: comment and signature as prefix, function body as middle
  code_to_doc,  ///< structured: comment as middle, the code before and after it as context
};

/// A middle in body tokens: body[begin, end) (the body is the document without BOS and EOS).
struct FimSplit {
  std::size_t begin = 0;  ///< first middle token
  std::size_t end = 0;    ///< one past the last middle token
};

/// The two structured splits of one document, in body tokens (fim_spans.hpp finds them).
struct StructuredFim {
  FimSplit doc_to_code;  ///< middle = the function body between its braces
  FimSplit code_to_doc;  ///< middle = the comment above the function
};

/// A document after fim_transform, and which rewrite it got.
struct FimDocument {
  std::vector<std::int32_t> tokens;  ///< BOS ... EOS, PSM when kind is not plain
  FimKind kind = FimKind::plain;     ///< the rewrite applied
};

namespace detail {
inline std::vector<std::int32_t> psm(const std::vector<std::int32_t>& body, std::size_t a, std::size_t b,
                                     const SpecialTokens& sp) {
  std::vector<std::int32_t> out;
  out.reserve(body.size() + 5);
  out.push_back(sp.bos);
  out.push_back(sp.fim_prefix);
  out.insert(out.end(), body.begin(), body.begin() + static_cast<std::ptrdiff_t>(a));
  out.push_back(sp.fim_suffix);
  out.insert(out.end(), body.begin() + static_cast<std::ptrdiff_t>(b), body.end());
  out.push_back(sp.fim_middle);
  out.insert(out.end(), body.begin() + static_cast<std::ptrdiff_t>(a), body.begin() + static_cast<std::ptrdiff_t>(b));
  out.push_back(sp.eos);
  return out;
}
}  // namespace detail

/// Rewrites one document (BOS body [EOS]) as PSM with probability config.rate. Of those, a share
/// config.structured_share uses `structured` (when the document has one, else random cuts), split
/// between its two directions by config.code_to_doc_share. Every decision draws from `rng` in a
/// fixed order, so a seed gives the same shards.
inline FimDocument fim_transform(const std::vector<std::int32_t>& document, const SpecialTokens& sp,
                                 const FimConfig& config, Rng& rng,
                                 const std::optional<StructuredFim>& structured = std::nullopt) {
  check(!document.empty() && document.front() == sp.bos, "fim_transform", "a document must start with BOS (",
        sp.bos, ")");
  const bool has_eos = document.size() > 1 && document.back() == sp.eos;
  const std::vector<std::int32_t> body(document.begin() + 1, document.end() - (has_eos ? 1 : 0));
  if (body.size() < 2 || rng.uniform() >= config.rate) return {document, FimKind::plain};
  if (rng.uniform() < config.structured_share && structured) {
    const bool to_doc = rng.uniform() < config.code_to_doc_share;
    const FimSplit s = to_doc ? structured->code_to_doc : structured->doc_to_code;
    check(s.begin < s.end && s.end <= body.size(), "fim_transform", "structured middle [", s.begin, ", ", s.end,
          ") is empty or outside the body of ", body.size(), " tokens");
    return {detail::psm(body, s.begin, s.end, sp), to_doc ? FimKind::code_to_doc : FimKind::doc_to_code};
  }
  std::size_t cut_a = static_cast<std::size_t>(rng.below(body.size() + 1));
  std::size_t cut_b = static_cast<std::size_t>(rng.below(body.size() + 1));
  if (cut_a > cut_b) std::swap(cut_a, cut_b);
  return {detail::psm(body, cut_a, cut_b, sp), FimKind::random};
}

/// True for the three FIM sentinels, the only targets the loss mask drops.
inline bool is_fim_sentinel(std::int32_t token, const SpecialTokens& sp) {
  return token == sp.fim_prefix || token == sp.fim_suffix || token == sp.fim_middle;
}

/// loss_mask[t] for targets[t]: 0 when the target is a FIM sentinel (`<PRE>`, `<SUF>`, `<MID>`),
/// 1 otherwise (plain text, prefix, suffix, middle, EOS). The rule reads the target alone, so a
/// row needs no context from the tokens before it.
template <class T>
void fim_loss_mask(const std::int32_t* targets, std::size_t n, const SpecialTokens& sp, T* mask) {
  for (std::size_t t = 0; t < n; ++t) mask[t] = is_fim_sentinel(targets[t], sp) ? T(0) : T(1);
}

}  // namespace megacpp::data
