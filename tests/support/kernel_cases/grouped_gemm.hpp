// Kernel cases of the GroupedGemm contract (megacpp/core/kernels/grouped_gemm.hpp), reached
// through grouped_matmul (megacpp/autograd/ops/grouped_matmul.hpp). The reference is a literal
// host loop in double, forward and backward, one group at a time:
//
//   y[r, j] = sum_c x[r, c] w[g, j, c]              for r in group g
//   dx[r, c] = sum_j dy[r, j] w[g, j, c],   dw[g, j, c] = sum_{r in g} dy[r, j] x[r, c]
//
// Part of tests/support/kernel_cases.hpp.
#pragma once

#include <vector>

#include "support/kernel_case.hpp"

#include "megacpp/autograd/ops/grouped_matmul.hpp"

namespace megacpp::testing {

template <>
struct KernelCases<kernels::GroupedGemm> {
  static constexpr bool specialised = true;
  static constexpr const char* reference = "a host loop in double, group by group";

  // Sums of up to 40 products in float against double: a few ulps of the largest term.
  static constexpr Tolerance kTolerance{2e-6, 1e-13};

  template <class T, Backend B>
  static std::vector<KernelCase<T, B>> cases() {
    using H = Harness<T, B>;
    return {
        {"8 uneven groups, two empty, K 12, N 10",
         [](H& h) { return problem(h, {3, 0, 7, 1, 0, 13, 2, 5}, 12, 10); }, kTolerance, true},
        {"one group", [](H& h) { return problem(h, {9}, 5, 7); }, kTolerance, true},
        {"3 groups wider than a tile (N 70, K 40), the first empty",
         [](H& h) { return problem(h, {0, 14, 3}, 40, 70); }, kTolerance, false},
    };
  }

 private:
  // inputs: x (M, K), w (E, N, K); sizes[g] rows in group g.
  template <class T, Backend B>
  static KernelProblem<T, B> problem(Harness<T, B>& h, std::vector<index_t> sizes, index_t K, index_t N) {
    using V = Var<T, B>;
    const index_t E = static_cast<index_t>(sizes.size());
    std::vector<index_t> offsets{0};
    for (index_t s : sizes) offsets.push_back(offsets.back() + s);
    const index_t M = offsets.back();
    std::vector<V> inputs{h.param({M, K}), h.param({E, N, K})};
    auto fused = [offsets](const std::vector<V>& in) { return grouped_matmul(in[0], in[1], offsets); };
    auto reference = [offsets, E, K, N, M](const std::vector<V>& in, Harness<T, B>& hr) {
      const std::vector<double> x = Harness<T, B>::doubles(in[0].value()), w = Harness<T, B>::doubles(in[1].value());
      const std::vector<double> dy = Harness<T, B>::doubles(hr.uniform(Shape{M, N}));
      std::vector<double> y(static_cast<std::size_t>(M * N)), dx(x.size()), dw(w.size());
      for (index_t g = 0; g < E; ++g)
        for (index_t r = offsets[g]; r < offsets[g + 1]; ++r)
          for (index_t j = 0; j < N; ++j)
            for (index_t c = 0; c < K; ++c) {
              const index_t wi = (g * N + j) * K + c;
              y[r * N + j] += x[r * K + c] * w[wi];
              dx[r * K + c] += dy[r * N + j] * w[wi];
              dw[wi] += dy[r * N + j] * x[r * K + c];
            }
      return Outputs{y, dx, dw};
    };
    return {std::move(inputs), fused, reference};
  }
};

}  // namespace megacpp::testing
