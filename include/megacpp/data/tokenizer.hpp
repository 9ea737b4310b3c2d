// megacpp/data/tokenizer.hpp: the byte-level tokenizer with built-in special tokens.
//
// Ids 0-255 are raw bytes (so any source file round-trips exactly, whatever its encoding);
// then BOS (starts every document: doc_ids derive from it), EOS, and the fill-in-the-middle
// sentinels of Bavarian et al., "Efficient Training of Language Models to Fill in the Middle"
// (arXiv 2207.14255). Models may use a larger (padded) vocabulary; ids above kVocab never occur.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "megacpp/core/error.hpp"

namespace megacpp::data {

/// Ids of the special tokens a data pipeline needs.
struct SpecialTokens {
  std::int32_t bos = 256;         ///< begins every document
  std::int32_t eos = 257;         ///< ends a document (or a FIM middle)
  std::int32_t fim_prefix = 258;  ///< `<PRE>`: the prefix follows
  std::int32_t fim_suffix = 259;  ///< `<SUF>`: the suffix follows
  std::int32_t fim_middle = 260;  ///< `<MID>`: the middle to generate follows
};

/// Bytes as tokens, plus SpecialTokens at 256-260.
class ByteTokenizer {
 public:
  /// Number of token ids: 256 bytes plus the 5 special tokens.
  static constexpr std::int32_t kVocab = 261;

  /// The ids of the special tokens.
  const SpecialTokens& special() const { return special_; }
  /// Number of token ids (kVocab).
  std::int32_t vocab_size() const { return kVocab; }

  /// BOS + the bytes of `text` (+ EOS when `with_eos`).
  std::vector<std::int32_t> encode_document(std::string_view text, bool with_eos = true) const {
    std::vector<std::int32_t> ids;
    ids.reserve(text.size() + 2);
    ids.push_back(special_.bos);
    for (const char c : text) ids.push_back(static_cast<unsigned char>(c));
    if (with_eos) ids.push_back(special_.eos);
    return ids;
  }

  /// Bytes back to text; special tokens are shown as `<BOS>`, `<EOS>`, `<PRE>`, `<SUF>`, `<MID>`.
  std::string decode(const std::vector<std::int32_t>& ids) const {
    std::string out;
    for (const std::int32_t id : ids) {
      check(id >= 0 && id < kVocab, "ByteTokenizer", "id ", id, " outside the vocabulary of ", kVocab);
      if (id < 256) out += static_cast<char>(id);
      else if (id == special_.bos) out += "<BOS>";
      else if (id == special_.eos) out += "<EOS>";
      else if (id == special_.fim_prefix) out += "<PRE>";
      else if (id == special_.fim_suffix) out += "<SUF>";
      else out += "<MID>";
    }
    return out;
  }

 private:
  SpecialTokens special_;
};

}  // namespace megacpp::data
