// Kernel cases of the ExpertRouting contract (megacpp/core/kernels/expert_routing.hpp), reached
// through DispatchPlan<B>::route (megacpp/nn/moe/dispatch.hpp). The reference is written the other
// way round from the kernels: each token's experts ordered by a std::stable_sort on the key
// (descending; stable, so ties keep the lower index first) and its first k taken, then the pairs
// std::stable_sort-ed by expert. The scores are rounded to quarters first, so ties are common.
// The result is the plan's integers as one vector (score_index, token_of_row, row_of_slot, offsets):
// forward only, exact. Part of tests/support/kernel_cases.hpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "support/kernel_case.hpp"

#include "megacpp/nn/moe/dispatch.hpp"

namespace megacpp::testing {

template <>
struct KernelCases<kernels::ExpertRouting> {
  static constexpr bool specialised = true;
  static constexpr const char* reference = "std::stable_sort of each token's keys, then of the pairs by expert";

  static constexpr Tolerance kExact{0.0, 0.0};  // integers

  template <class T, Backend B>
  static std::vector<KernelCase<T, B>> cases() {
    using H = Harness<T, B>;
    return {
        {"9 tokens, 4 experts, top-2", [](H& h) { return problem(h, 9, 4, 2, false); }, kExact, false},
        {"40 tokens, 8 experts, top-3, a choice bias", [](H& h) { return problem(h, 40, 8, 3, true); }, kExact, false},
        {"top-1 of 3, one token", [](H& h) { return problem(h, 1, 3, 1, false); }, kExact, false},
        {"700 tokens, 64 experts, top-8 (many empty groups)", [](H& h) { return problem(h, 700, 64, 8, true); }, kExact,
         false},
    };
  }

 private:
  static std::vector<double> bias_of(index_t experts) {  // -0.5, -0.25, 0, 0.25, ...: reorders the quarters
    std::vector<double> b(static_cast<std::size_t>(experts));
    for (index_t e = 0; e < experts; ++e) b[e] = 0.25 * static_cast<double>(e % 4) - 0.5;
    return b;
  }

  template <class T, Backend B>
  static Tensor<T, B> quarters(const Tensor<T, B>& x) {
    std::vector<T> v = x.to_host();
    for (T& s : v) s = static_cast<T>(std::floor(static_cast<double>(s) * 4.0) / 4.0);
    return Tensor<T, B>::from_host(x.shape(), v);
  }

  template <class T, Backend B>
  static KernelProblem<T, B> problem(Harness<T, B>& h, index_t tokens, index_t experts, index_t k, bool with_bias) {
    using V = Var<T, B>;
    std::vector<V> inputs{V(h.uniform({tokens, experts}))};
    auto fused = [k, with_bias, experts](const std::vector<V>& in) {
      const std::vector<double> bias = bias_of(experts);
      const DispatchPlan<B> p = DispatchPlan<B>::route(quarters(in[0].value()), with_bias ? &bias : nullptr, k);
      std::vector<T> out;
      for (const BoundedIds<B>* t : {&p.score_index, &p.token_of_row, &p.row_of_slot})
        for (std::int32_t i : t->ids().to_host()) out.push_back(static_cast<T>(i));
      for (index_t o : p.offsets) out.push_back(static_cast<T>(o));
      return V(Tensor<T, B>::from_host(Shape{static_cast<index_t>(out.size())}, out));
    };
    auto reference = [tokens, experts, k, with_bias](const std::vector<V>& in, Harness<T, B>&) {
      const std::vector<double> s = Harness<T, B>::doubles(quarters(in[0].value()));
      const std::vector<double> bias = bias_of(experts);
      const index_t rows = tokens * k;
      std::vector<index_t> selected(static_cast<std::size_t>(rows));
      for (index_t t = 0; t < tokens; ++t) {
        std::vector<index_t> order(static_cast<std::size_t>(experts));
        std::iota(order.begin(), order.end(), index_t{0});
        auto key = [&](index_t e) { return s[t * experts + e] + (with_bias ? bias[e] : 0.0); };
        std::stable_sort(order.begin(), order.end(), [&](index_t a, index_t b) { return key(a) > key(b); });
        std::copy(order.begin(), order.begin() + k, selected.begin() + t * k);
      }
      std::vector<index_t> pairs(static_cast<std::size_t>(rows));
      std::iota(pairs.begin(), pairs.end(), index_t{0});
      std::stable_sort(pairs.begin(), pairs.end(), [&](index_t a, index_t b) { return selected[a] < selected[b]; });
      std::vector<double> score_index(static_cast<std::size_t>(rows)), token_of_row(score_index.size()),
          row_of_slot(score_index.size()), offsets(static_cast<std::size_t>(experts + 1), 0.0);
      for (index_t p = 0; p < rows; ++p) score_index[p] = static_cast<double>(p / k * experts + selected[p]);
      for (index_t r = 0; r < rows; ++r) {
        const index_t pair = pairs[r], t = pair / k, j = pair % k;
        token_of_row[r] = static_cast<double>(t);
        row_of_slot[j * tokens + t] = static_cast<double>(r);
      }
      for (index_t e = 0; e < experts; ++e)
        offsets[e + 1] = offsets[e] + static_cast<double>(std::count(selected.begin(), selected.end(), e));
      std::vector<double> out = score_index;
      for (const std::vector<double>* v : {&token_of_row, &row_of_slot, &offsets}) out.insert(out.end(), v->begin(), v->end());
      return Outputs{out};
    };
    return {std::move(inputs), fused, reference};
  }
};

}  // namespace megacpp::testing
