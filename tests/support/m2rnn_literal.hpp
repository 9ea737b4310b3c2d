// Shared test helper for M2RNN's kernel cases (tests/support/kernel_cases/m2rnn_step.hpp and
// m2rnn_scan.hpp): the recurrence written out as a host loop in double over whole packed rows,
// from the formulas of the contracts' comments (A = H W + k v^T, the blend through tanh, the
// readout), the state zeroed at every document start. Shares no code with the kernels. Includes no
// backend and no test framework (the CUDA test's nvcc translation unit uses it too).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "support/decode_steps.hpp"

#include "megacpp/core/kernels/documents.hpp"

namespace megacpp::testing {

// The operands in double, in this order: q, k (batch, seq, heads, K); v (batch, seq, heads, V);
// f (batch, seq, heads), the gate itself; W (heads, V, V), as the recurrence uses it.
enum M2RNNOperand { kM2RNNQ, kM2RNNK, kM2RNNV, kM2RNNF, kM2RNNW };

// y (batch, seq, heads, V), per (row, head) in double.
template <Backend B>
std::vector<double> m2rnn_literal_recurrence(const DocumentLayout<B>& docs, index_t heads, index_t K, index_t Vd,
                                             const std::vector<std::vector<double>>& x) {
  const auto at = [](index_t i) { return static_cast<std::size_t>(i); };
  std::vector<double> y(at(docs.batch * docs.seq * heads * Vd));
  for (index_t b = 0; b < docs.batch; ++b)
    for (index_t h = 0; h < heads; ++h) {
      std::vector<double> H(at(K * Vd)), next(H.size());
      for (index_t t = 0; t < docs.seq; ++t) {
        if (starts_document_at(docs.spans[at(b)], t)) std::fill(H.begin(), H.end(), 0.0);
        const index_t bth = (b * docs.seq + t) * heads + h;
        const double f = x[kM2RNNF][at(bth)];
        for (index_t i = 0; i < K; ++i)
          for (index_t c = 0; c < Vd; ++c) {
            double a = x[kM2RNNK][at(bth * K + i)] * x[kM2RNNV][at(bth * Vd + c)];
            for (index_t j = 0; j < Vd; ++j) a += H[at(i * Vd + j)] * x[kM2RNNW][at((h * Vd + j) * Vd + c)];
            next[at(i * Vd + c)] = f * H[at(i * Vd + c)] + (1 - f) * std::tanh(a);
          }
        H.swap(next);
        for (index_t c = 0; c < Vd; ++c) {
          double acc = 0;
          for (index_t i = 0; i < K; ++i) acc += x[kM2RNNQ][at(bth * K + i)] * H[at(i * Vd + c)];
          y[at(bth * Vd + c)] = acc;
        }
      }
    }
  return y;
}

}  // namespace megacpp::testing
