// Every case of every kernel contract (tests/support/kernel_cases.hpp) on the CPU backend, through
// check_kernel_case: the fused op against its naive reference in float and double, and gradcheck
// in double where the case allows it. Then the harness itself: it must fail a fused op with a
// wrong forward or backward and a backend that disagrees (every check here must be able to fail).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "support/kernel_cases.hpp"

#include "megacpp/backends/cpu.hpp"

using namespace megacpp;
using namespace megacpp::testing;

namespace {

// CHECKs every result of check_kernel_case, naming the check and what went wrong.
void check_all(const std::vector<KernelCheckResult>& results) {
  REQUIRE_FALSE(results.empty());
  for (const KernelCheckResult& r : results) {
    INFO(r.what << ": " << r.failure);
    CHECK(r.failure.empty());
  }
}

}  // namespace

TEST_CASE("kernel case tables: every contract has cases, the same list in float and double, unique names",
          "[kernels]") {
  for_each_kernel(kernels::AllKernels{}, []<template <class> class Kernel>(std::size_t contract) {
    INFO(kernels::kKernelNames[contract]);
    CHECK(kernel_index<Kernel>() == contract);
    const auto float_cases = KernelCases<Kernel>::template cases<float, Cpu>();
    const auto double_cases = KernelCases<Kernel>::template cases<double, Cpu>();
    CHECK_FALSE(float_cases.empty());
    REQUIRE(float_cases.size() == double_cases.size());
    std::set<std::string> names;
    for (std::size_t i = 0; i < float_cases.size(); ++i) {
      CHECK(std::string(float_cases[i].name) == double_cases[i].name);
      CHECK(names.insert(float_cases[i].name).second);
    }
  });
}

TEST_CASE("kernel cases on the CPU: fused vs reference (float, double), gradcheck (double)", "[kernels][gradcheck]") {
  for_each_kernel(kernels::AllKernels{}, []<template <class> class Kernel>(std::size_t contract) {
    const std::size_t count = KernelCases<Kernel>::template cases<float, Cpu>().size();
    for (std::size_t i = 0; i < count; ++i) {
      DYNAMIC_SECTION(kernels::kKernelNames[contract] << " case " << i) {
        check_all(check_kernel_case<Kernel, Cpu>(i, {.reference = true, .gradcheck = true}));
      }
    }
  });
}

namespace {

// Case `Index` of Kernel's table (double) with its fused op replaced by Sabotage(fused(inputs)).
template <template <class> class Kernel, std::size_t Index, auto Sabotage>
KernelCase<double, Cpu> sabotaged() {
  KernelCase<double, Cpu> c = KernelCases<Kernel>::template cases<double, Cpu>().at(Index);
  c.make = [](Harness<double, Cpu>& h) {
    KernelProblem<double, Cpu> p = KernelCases<Kernel>::template cases<double, Cpu>().at(Index).make(h);
    p.fused = [f = p.fused](const std::vector<Var<double, Cpu>>& in) { return Sabotage(f(in)); };
    return p;
  };
  return c;
}

// The forward value 1e-6 too large (relative): its gradients are scaled alike, so gradcheck agrees.
constexpr auto kForwardOff = [](const Var<double, Cpu>& y) { return scale(y, 1.0 + 1e-6); };
// The right forward value with half the gradient: y/2 + (a constant copy of y)/2.
constexpr auto kHalfGradient = [](const Var<double, Cpu>& y) {
  return add(scale(y, 0.5), scale(Var<double, Cpu>(y.value()), 0.5));
};

}  // namespace

TEST_CASE("the harness fails a wrong forward, a wrong backward and a disagreeing backend", "[kernels][harness]") {
  const std::uint64_t seed = 1;
  SECTION("a forward off by 1e-6: the reference check fails, gradcheck still passes") {
    const auto attention = sabotaged<kernels::FusedAttention, 0, kForwardOff>();
    CHECK_FALSE(compare_with_reference(attention, seed).empty());
    const auto conv = sabotaged<kernels::CausalConv1d, 0, kForwardOff>();
    CHECK_FALSE(compare_with_reference(conv, seed).empty());
    CHECK(gradcheck_kernel_case(conv, seed).ok);
    // A forward-only reference (the scan's) still judges the forward.
    const auto scan = sabotaged<kernels::SsmScan, 0, kForwardOff>();
    CHECK_FALSE(compare_with_reference(scan, seed).empty());
  }
  SECTION("half the gradient: the reference check (on gradients) and gradcheck both fail") {
    const auto conv = sabotaged<kernels::CausalConv1d, 0, kHalfGradient>();
    const std::string why = compare_with_reference(conv, seed);
    CHECK_FALSE(why.empty());
    CHECK_THAT(why, !Catch::Matchers::StartsWith("output 0"));  // the worst element is a gradient's, not the value's
    CHECK_FALSE(gradcheck_kernel_case(conv, seed).ok);
  }
  SECTION("backend vs backend: equal results pass, one element off by 1e-8 of its output's scale fails in double") {
    const auto c = KernelCases<kernels::SoftcapCrossEntropy>::cases<double, Cpu>().at(0);
    Outputs other = run_fused(c, seed);
    CHECK(compare_with_backend(c, seed, other).empty());
    double scale = 0;  // of dW
    for (double x : other[2]) scale = std::max(scale, std::abs(x));
    REQUIRE(scale > 0);
    other[2][5] += 1e-8 * scale;
    CHECK_THAT(compare_with_backend(c, seed, other), Catch::Matchers::Contains("output 2 element 5"));
  }
  SECTION("check_kernel_case reports each check it ran and a throwing case as a failure") {
    const auto results = check_kernel_case<kernels::CausalConv1d, Cpu>(0, {.reference = true, .gradcheck = true});
    CHECK(results.size() == 3);  // float and double references, gradcheck
    auto failing_backend = [](bool) -> Outputs { throw Error("test", "no such backend"); };
    const auto thrown = check_kernel_case<kernels::CausalConv1d, Cpu>(0, {.other_backend = failing_backend});
    REQUIRE(thrown.size() == 2);
    CHECK_THAT(thrown[0].failure, Catch::Matchers::Contains("threw") && Catch::Matchers::Contains("no such backend"));
  }
}
