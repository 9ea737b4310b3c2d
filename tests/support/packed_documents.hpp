// Shared test helper: packed rows of documents from their lengths, on any backend (one helper,
// not a copy per test file). Includes no backend and no test framework, so the nvcc translation
// unit of the CUDA test uses it too; documents_testing.hpp adds the CPU shorthand.
// DocumentLayout::from_lengths builds a layout straight from lengths; these also give the token
// ids (for tests that feed tokens or find BOS positions) and rows that start mid-document.
#pragma once

#include <cstdint>
#include <vector>

#include "megacpp/core/error.hpp"
#include "megacpp/core/kernels/documents.hpp"

namespace megacpp::testing {

// Token ids of rows of packed documents given their lengths: each document is BOS, then filler
// tokens (ids in [bos + 1, bos + 8)). A negative first length -n means the row starts
// mid-document: n tokens before its first BOS. Every row must hold the same number of tokens.
inline std::vector<std::int32_t> packed_tokens(const std::vector<std::vector<index_t>>& rows, std::int32_t bos) {
  std::vector<std::int32_t> ids;
  index_t seq = -1;
  for (std::size_t b = 0; b < rows.size(); ++b) {
    index_t n = 0;
    for (std::size_t d = 0; d < rows[b].size(); ++d) {
      const bool continues = rows[b][d] < 0;
      const index_t len = continues ? -rows[b][d] : rows[b][d];
      for (index_t t = 0; t < len; ++t)
        ids.push_back(t == 0 && !continues ? bos : bos + 1 + static_cast<std::int32_t>((d + t) % 7));
      n += len;
    }
    check(seq < 0 || seq == n, "packed_tokens", "row ", b, " holds ", n, " tokens but row 0 holds ", seq,
          ": every row must have the same length");
    seq = n;
  }
  return ids;
}

// The layout of packed_tokens(rows, bos) on backend B: documents from BOS positions, as a model
// sees them.
template <Backend B>
DocumentLayout<B> packed_layout(const std::vector<std::vector<index_t>>& rows, std::int32_t bos,
                                Positions mode = Positions::per_document) {
  const std::vector<std::int32_t> ids = packed_tokens(rows, bos);
  const index_t batch = static_cast<index_t>(rows.size());
  return DocumentLayout<B>::from_tokens(ids, batch, static_cast<index_t>(ids.size()) / batch, bos, mode);
}

}  // namespace megacpp::testing
