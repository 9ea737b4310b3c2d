// Shared layer-level document-isolation test (STYLE.md habit 6: one helper, not a copy per test
// file): a layer over one row packing document A then document B must compute B as if A were not
// there. Complements masking_testing.hpp, which checks whole one-block models through the library's
// checker; this one checks a bare layer (or block) in double precision, bit for bit.
#pragma once

#include "support/documents_testing.hpp"
#include "support/op_testing.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace megacpp::testing {

// `layer` (forward(x, docs), x (1, seq, d_model), double, CPU) on one row [A: ta tokens][B: tb
// tokens], documents starting at BOS (`bos`):
// - B's outputs inside the pack equal B's outputs alone, bitwise;
// - changing A's inputs (to other values, or to NaN) leaves B's outputs bitwise unchanged;
// - a loss on B's outputs has exactly zero gradient with respect to A's inputs, and a nonzero one
//   with respect to B's (so the gradient reached the inputs at all).
template <class Layer>
void check_documents_isolated(const std::string& name, const Layer& layer, index_t d_model, index_t ta, index_t tb,
                              std::int32_t bos = 0) {
  INFO(name);
  const index_t seq = ta + tb, a_elems = ta * d_model, elems = seq * d_model;
  const DocumentLayout<Cpu> packed = packed_layout({{ta, tb}}, bos);
  const DocumentLayout<Cpu> alone = packed_layout({{tb}}, bos);
  const V64 u = random_param({1, seq, d_model}, 13);
  const std::vector<double> uv = u.value().to_host();
  const V64 u_b(T64::from_host({1, tb, d_model}, std::vector<double>(uv.begin() + a_elems, uv.end())));
  auto b_part = [&](const V64& y) {
    const std::vector<double> all = y.value().to_host();
    return std::vector<double>(all.begin() + a_elems, all.end());
  };
  {
    NoGrad no_grad;
    const std::vector<double> b_packed = b_part(layer.forward(u, packed));
    // the scan's chunks start at B's first token, and a projection's GEMM computes a row the same
    // way whatever rows surround it
    const std::vector<double> b_alone = layer.forward(u_b, alone).value().to_host();
    double worst = 0;  // what the failure report shows
    for (std::size_t i = 0; i < b_alone.size(); ++i)
      worst = std::max(worst, std::abs(b_packed[i] - b_alone[i]) / std::max(1e-3, std::abs(b_alone[i])));
    INFO("B packed vs alone, max relative difference " << worst);
    CHECK(b_packed == b_alone);
    for (double fill : {3.7, std::numeric_limits<double>::quiet_NaN()}) {
      std::vector<double> changed = uv;
      for (index_t i = 0; i < a_elems; ++i) changed[static_cast<std::size_t>(i)] = fill * static_cast<double>(i + 1);
      INFO("A's inputs changed to multiples of " << fill);
      CHECK(b_part(layer.forward(V64(T64::from_host({1, seq, d_model}, changed)), packed)) == b_packed);
    }
  }
  const V64 x = V64::parameter(u.value().clone());
  const V64 y = layer.forward(x, packed);
  std::vector<double> w(static_cast<std::size_t>(elems), 0.0);
  for (index_t i = a_elems; i < elems; ++i) w[static_cast<std::size_t>(i)] = 1.0 + 0.1 * static_cast<double>(i);
  backward(sum(mul(y, V64(T64::from_host(y.shape(), w)))));
  const std::vector<double> g = x.grad().to_host();
  bool a_zero = true, b_nonzero = false;
  for (index_t i = 0; i < elems; ++i) {
    if (i < a_elems) a_zero = a_zero && g[static_cast<std::size_t>(i)] == 0.0;
    else b_nonzero = b_nonzero || g[static_cast<std::size_t>(i)] != 0.0;
  }
  CHECK(a_zero);
  CHECK(b_nonzero);
}

}  // namespace megacpp::testing
