// Shared test helper: packed rows of documents from their lengths (one helper, not a copy per
// test file). DocumentLayout::from_lengths builds a layout straight from lengths; these also give
// the token ids, for tests that feed tokens (models) or find BOS positions (decoding).
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "megacpp/backends/cpu.hpp"

namespace megacpp::testing {

// Token ids of rows of packed documents given their lengths: each document is BOS, then filler
// tokens (ids in [bos + 1, bos + 8)). A negative first length -n means the row starts
// mid-document: n tokens before its first BOS. Every row must hold the same number of tokens.
inline std::vector<std::int32_t> packed_tokens(const std::vector<std::vector<index_t>>& rows, std::int32_t bos) {
  std::vector<std::int32_t> ids;
  index_t seq = -1;
  for (const auto& lengths : rows) {
    index_t n = 0;
    for (std::size_t d = 0; d < lengths.size(); ++d) {
      const bool continues = lengths[d] < 0;
      const index_t len = continues ? -lengths[d] : lengths[d];
      for (index_t t = 0; t < len; ++t)
        ids.push_back(t == 0 && !continues ? bos : bos + 1 + static_cast<std::int32_t>((d + t) % 7));
      n += len;
    }
    REQUIRE((seq < 0 || seq == n));
    seq = n;
  }
  return ids;
}

// The layout of packed_tokens(rows, bos): documents from BOS positions, as a model sees them.
inline DocumentLayout<Cpu> packed_layout(const std::vector<std::vector<index_t>>& rows, std::int32_t bos,
                                         Positions mode = Positions::per_document) {
  const std::vector<std::int32_t> ids = packed_tokens(rows, bos);
  const index_t batch = static_cast<index_t>(rows.size());
  return DocumentLayout<Cpu>::from_tokens(ids, batch, static_cast<index_t>(ids.size()) / batch, bos, mode);
}

}  // namespace megacpp::testing
