// Shared test helper for the decode-step kernel cases (tests/support/kernel_cases/ssm_step.hpp,
// m2rnn_step.hpp): a case draws its operands for a whole packed sequence, then feeds them to the
// step token by token. These are the pieces both tables need: where a row's documents start, one
// token's slice of an operand, and host values placed in backend memory. Includes no backend and
// no test framework (the nvcc translation unit of the CUDA test uses it too).
#pragma once

#include <algorithm>
#include <vector>

#include "megacpp/core/kernels/documents.hpp"
#include "megacpp/core/tensor.hpp"

namespace megacpp::testing {

// Whether one of a row's documents starts at token t.
inline bool starts_document_at(const std::vector<DocumentSpan>& spans, index_t t) {
  return std::any_of(spans.begin(), spans.end(), [t](const DocumentSpan& s) { return s.start == t; });
}

// Token t of every row of an operand laid out (batch, seq, width), rows in order: (batch, width).
inline std::vector<double> token_slice(const std::vector<double>& operand, index_t batch, index_t seq, index_t t,
                                       index_t width) {
  std::vector<double> out;
  out.reserve(static_cast<std::size_t>(batch * width));
  for (index_t b = 0; b < batch; ++b) {
    const auto first = operand.begin() + (b * seq + t) * width;
    out.insert(out.end(), first, first + width);
  }
  return out;
}

// Host values rounded to T, in backend memory.
template <class T, Backend B>
Tensor<T, B> on_backend(const std::vector<double>& values, const Shape& shape) {
  const std::vector<T> cast(values.begin(), values.end());
  return Tensor<T, B>::from_host(shape, cast);
}

}  // namespace megacpp::testing
