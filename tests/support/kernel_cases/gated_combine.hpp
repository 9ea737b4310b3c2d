// Kernel cases of the GatedCombine contract (megacpp/core/kernels/gated_combine.hpp), reached
// through gated_combine (megacpp/autograd/ops/gated_combine.hpp). The reference is a literal
// host loop in double, forward and backward, token by token:
//
//   y[t, c] = sum_j gate[t, j] ys[r(t, j), c]
//   dys[r(t, j), c] = gate[t, j] dy[t, c],   dgate[t, j] = sum_c dy[t, c] ys[r(t, j), c]
//
// Part of tests/support/kernel_cases.hpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "support/kernel_case.hpp"

#include "megacpp/autograd/ops/gated_combine.hpp"

namespace megacpp::testing {

template <>
struct KernelCases<kernels::GatedCombine> {
  static constexpr bool specialised = true;
  static constexpr const char* reference = "a host loop in double, token by token";

  // Sums of up to 70 products in float against double.
  static constexpr Tolerance kTolerance{2e-6, 1e-13};

  template <class T, Backend B>
  static std::vector<KernelCase<T, B>> cases() {
    using H = Harness<T, B>;
    return {
        {"9 tokens, top-2, d 7, rows shuffled", [](H& h) { return problem(h, 9, 2, 7, 3); }, kTolerance, true},
        {"top-1 (the combine is a gated permutation)", [](H& h) { return problem(h, 5, 1, 6, 4); }, kTolerance, true},
        {"40 tokens, top-4, d 70 (wider than a vector)", [](H& h) { return problem(h, 40, 4, 70, 5); }, kTolerance,
         false},
    };
  }

 private:
  // inputs: ys (tokens k, d), gate (tokens, k); row_of_slot a fixed shuffle of the rows.
  template <class T, Backend B>
  static KernelProblem<T, B> problem(Harness<T, B>& h, index_t tokens, index_t k, index_t d, std::uint64_t seed) {
    using V = Var<T, B>;
    const index_t rows = tokens * k;
    std::vector<std::int32_t> row_of_slot(static_cast<std::size_t>(rows));
    std::iota(row_of_slot.begin(), row_of_slot.end(), 0);
    for (std::size_t i = row_of_slot.size(); i > 1; --i)  // a deterministic shuffle (LCG)
      std::swap(row_of_slot[i - 1], row_of_slot[(seed * 2654435761u + i * 40503u) % i]);
    std::vector<V> inputs{h.param({rows, d}), h.param({tokens, k})};
    auto fused = [row_of_slot](const std::vector<V>& in) { return gated_combine(in[0], in[1], row_of_slot); };
    auto reference = [row_of_slot, tokens, k, d](const std::vector<V>& in, Harness<T, B>& hr) {
      const std::vector<double> ys = Harness<T, B>::doubles(in[0].value()), gate = Harness<T, B>::doubles(in[1].value());
      const std::vector<double> dy = Harness<T, B>::doubles(hr.uniform(Shape{tokens, d}));
      std::vector<double> y(static_cast<std::size_t>(tokens * d)), dys(ys.size()), dgate(gate.size());
      for (index_t t = 0; t < tokens; ++t)
        for (index_t j = 0; j < k; ++j) {
          const index_t r = row_of_slot[static_cast<std::size_t>(j * tokens + t)];
          for (index_t c = 0; c < d; ++c) {
            y[t * d + c] += gate[t * k + j] * ys[r * d + c];
            dys[r * d + c] += gate[t * k + j] * dy[t * d + c];
            dgate[t * k + j] += dy[t * d + c] * ys[r * d + c];
          }
        }
      return Outputs{y, dys, dgate};
    };
    return {std::move(inputs), fused, reference};
  }
};

}  // namespace megacpp::testing
