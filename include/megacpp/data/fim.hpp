// megacpp/data/fim.hpp: fill-in-the-middle documents and the loss mask they imply.
//
// FIM (Bavarian et al. 2022, arXiv 2207.14255), PSM order: a document
//   BOS body EOS   becomes   BOS <PRE> prefix <SUF> suffix <MID> middle EOS
// where body = prefix + middle + suffix. docs/recipe.md: code is 40% next-token, 40% random FIM
// (cut points uniform), 20% structured FIM (docstring/comment prefix -> body middle); and no loss
// on a target the input trivially leaks. The prefix and suffix are given to the model as context,
// so their targets carry no FIM signal and are masked; the middle and its EOS are learned.
// The transform runs when shards are written (deterministic in a seed); the mask is derived from
// the sentinels when rows are read, as doc_ids are derived from BOS.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "megacpp/core/random.hpp"
#include "megacpp/data/tokenizer.hpp"

namespace megacpp::data {

/// How often and how documents are turned into FIM examples.
struct FimConfig {
  double rate = 0.5;              ///< probability a document becomes a FIM example
  double structured_share = 1.0 / 3.0;  ///< of FIM examples, the share split at a leading comment/docstring
};

namespace detail {
// End of a leading comment block (// lines or a /* */ block, possibly indented) in a C/C++
// document: the "docstring" of structured FIM. Returns 0 when the document starts otherwise.
inline std::size_t leading_comment_end(const std::vector<std::int32_t>& body) {
  std::size_t i = 0;
  auto at = [&](std::size_t k, char c) { return k < body.size() && body[k] == static_cast<unsigned char>(c); };
  std::size_t end = 0;
  while (i < body.size()) {
    std::size_t j = i;
    while (at(j, ' ') || at(j, '\t')) ++j;
    if (at(j, '/') && at(j + 1, '/')) {
      while (j < body.size() && !at(j, '\n')) ++j;
      end = i = j + 1 <= body.size() ? j + 1 : j;
    } else if (at(j, '/') && at(j + 1, '*')) {
      j += 2;
      while (j + 1 < body.size() && !(at(j, '*') && at(j + 1, '/'))) ++j;
      if (j + 1 >= body.size()) return 0;  // unterminated: not a docstring
      end = i = j + 2;
      if (at(i, '\n')) end = ++i;
    } else {
      break;
    }
  }
  return std::min(end, body.size());
}
}  // namespace detail

/// Rewrites one document (BOS body [EOS]) as PSM with probability config.rate; else returns it.
inline std::vector<std::int32_t> fim_transform(const std::vector<std::int32_t>& document, const SpecialTokens& sp,
                                               const FimConfig& config, Rng& rng) {
  check(!document.empty() && document.front() == sp.bos, "fim_transform", "a document must start with BOS (",
        sp.bos, ")");
  const bool has_eos = document.size() > 1 && document.back() == sp.eos;
  const std::vector<std::int32_t> body(document.begin() + 1, document.end() - (has_eos ? 1 : 0));
  if (body.size() < 2 || rng.uniform() >= config.rate) return document;
  std::size_t cut_a = 0, cut_b = 0;  // prefix = body[0, a), middle = body[a, b), suffix = body[b, end)
  const std::size_t docstring = detail::leading_comment_end(body);
  if (docstring > 0 && docstring < body.size() && rng.uniform() < config.structured_share) {
    cut_a = docstring;  // structured: the comment is the prefix, the rest is the middle
    cut_b = body.size();
  } else {
    cut_a = static_cast<std::size_t>(rng.below(body.size() + 1));
    cut_b = static_cast<std::size_t>(rng.below(body.size() + 1));
    if (cut_a > cut_b) std::swap(cut_a, cut_b);
  }
  std::vector<std::int32_t> out;
  out.reserve(body.size() + 5);
  out.push_back(sp.bos);
  out.push_back(sp.fim_prefix);
  out.insert(out.end(), body.begin(), body.begin() + static_cast<std::ptrdiff_t>(cut_a));
  out.push_back(sp.fim_suffix);
  out.insert(out.end(), body.begin() + static_cast<std::ptrdiff_t>(cut_b), body.end());
  out.push_back(sp.fim_middle);
  out.insert(out.end(), body.begin() + static_cast<std::ptrdiff_t>(cut_a), body.begin() + static_cast<std::ptrdiff_t>(cut_b));
  out.push_back(sp.eos);
  return out;
}

/// Where a token stream stands with respect to FIM context (carried across row boundaries).
enum class FimRegion : std::uint8_t { plain, context, middle };

/// Applies the FIM state machine to one token: BOS starts a plain document, `<PRE>` opens the
/// context (prefix, `<SUF>`, suffix), `<MID>` opens the middle.
inline FimRegion fim_next_region(FimRegion r, std::int32_t token, const SpecialTokens& sp) {
  if (token == sp.bos) return FimRegion::plain;
  if (token == sp.fim_prefix) return FimRegion::context;
  if (token == sp.fim_middle) return FimRegion::middle;
  return r;
}

/// loss_mask[t] for targets[t] = inputs[t + 1]: 0 when the target is context of a FIM example
/// (prefix, `<SUF>`, suffix, or the `<MID>` that ends the context), 1 otherwise. `start` is the
/// region before inputs[0] (from the preceding tokens of the stream).
template <class T>
void fim_loss_mask(const std::int32_t* inputs, const std::int32_t* targets, std::size_t n, FimRegion start,
                   const SpecialTokens& sp, T* mask) {
  FimRegion r = start;
  for (std::size_t t = 0; t < n; ++t) {
    r = fim_next_region(r, inputs[t], sp);
    const FimRegion target_region = fim_next_region(r, targets[t], sp);
    const bool context = target_region == FimRegion::context || targets[t] == sp.fim_middle;
    mask[t] = context ? T(0) : T(1);
  }
}

}  // namespace megacpp::data
