// Shared test helpers: one way to gradcheck an op (STYLE.md habit 6), used by every test file.
#pragma once

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "megacpp/megacpp.hpp"

namespace megacpp::testing {

using V64 = Var<double, Cpu>;
using T64 = Tensor<double, Cpu>;

// A leaf parameter of standard-normal values (scaled), deterministic in `seed`.
inline V64 random_param(Shape shape, std::uint64_t seed, double std = 1.0, double mean = 0.0) {
  Rng rng(seed);
  return V64::parameter(randn<double, Cpu>(shape, rng, std, mean));
}

// Runs gradcheck on f(inputs) and fails the test with the worst element's report.
template <class F>
void require_gradcheck(const std::string& what, F&& f, std::vector<V64> inputs, GradcheckOptions opt = {}) {
  const GradcheckResult r = gradcheck<Cpu>(std::forward<F>(f), std::move(inputs), opt);
  INFO(what << ": " << r.report << " (checked " << r.checked << " elements, max |diff| " << r.max_abs_error << ")");
  REQUIRE(r.checked > 0);
  REQUIRE(r.ok);
}

}  // namespace megacpp::testing
