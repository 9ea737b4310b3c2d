// Shared test helper: packed rows of documents from their lengths on the CPU backend (the
// backend-independent helpers are in packed_documents.hpp; this adds the CPU shorthand).
#pragma once

#include <cstdint>
#include <vector>

#include "support/packed_documents.hpp"

#include "megacpp/backends/cpu.hpp"

namespace megacpp::testing {

// The layout of packed_tokens(rows, bos) on the CPU: documents from BOS positions, as a model sees them.
inline DocumentLayout<Cpu> packed_layout(const std::vector<std::vector<index_t>>& rows, std::int32_t bos,
                                         Positions mode = Positions::per_document) {
  return packed_layout<Cpu>(rows, bos, mode);
}

}  // namespace megacpp::testing
