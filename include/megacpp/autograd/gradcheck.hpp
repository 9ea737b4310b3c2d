/// \file
/// megacpp/autograd/gradcheck.hpp: finite-difference check of hand-written backward functions.
///
/// For f: inputs -> output (any shape), gradcheck compares the analytic gradient of
/// L = sum(f(inputs) * w), w fixed random weights (so every output element counts, with
/// different weights), against central differences (L(x + eps) - L(x - eps)) / (2 eps), in double,
/// for every element of every input that requires a gradient. It reports the worst element.
#pragma once

#include <cmath>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "megacpp/autograd/backward.hpp"
#include "megacpp/autograd/grad_mode.hpp"
#include "megacpp/autograd/ops/elementwise.hpp"
#include "megacpp/autograd/ops/reduce.hpp"
#include "megacpp/core/random.hpp"

namespace megacpp {

/// Step and tolerances of gradcheck.
struct GradcheckOptions {
  double eps = 1e-6;    ///< central-difference step
  double atol = 1e-6;   ///< pass if |analytic - numeric| <= atol + rtol * |numeric|
  double rtol = 1e-5;   ///< relative part of the tolerance (see atol)
  std::uint64_t seed = 1234;  ///< for the output weights w
};

/// What gradcheck found: pass/fail, the largest error and the worst element.
struct GradcheckResult {
  bool ok = true;            ///< every element within tolerance
  double max_abs_error = 0;  ///< over all checked elements
  std::size_t checked = 0;   ///< number of elements compared
  std::string report;        ///< the worst element: input, index, analytic, numeric
  explicit operator bool() const { return ok; }  ///< ok
};

/// Checks the analytic gradient of `f(inputs)` (a Var of any shape) against central differences,
/// in double, for every element of every input that requires a gradient (see the file comment).
template <Backend B, class F>
GradcheckResult gradcheck(F&& f, std::vector<Var<double, B>> inputs, const GradcheckOptions& opt = {}) {
  using Tensor64 = Tensor<double, B>;
  GradcheckResult result;
  const Var<double, B> probe = f(inputs);
  Rng rng(opt.seed);
  const Tensor64 w = rand_uniform<double, B>(probe.shape(), rng, 0.5, 1.5);
  const std::vector<double> w_host = w.to_host();
  auto weighted_sum = [&]() {
    NoGrad no_grad;
    const std::vector<double> y = f(inputs).value().to_host();
    double s = 0;
    for (std::size_t i = 0; i < y.size(); ++i) s += y[i] * w_host[i];
    return s;
  };

  for (auto& x : inputs) x.zero_grad();
  {
    Var<double, B> out = f(inputs);
    check(out.requires_grad(), "gradcheck", "the function's output does not depend on any input that requires a gradient");
    backward(sum(mul(out, Var<double, B>(w))));
  }

  double worst_excess = -1;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    auto& x = inputs[k];
    if (!x.requires_grad()) continue;
    const std::vector<double> analytic = x.grad().defined() ? x.grad().to_host() : std::vector<double>(x.numel(), 0.0);
    std::vector<double> values = x.value().to_host();
    for (std::size_t i = 0; i < values.size(); ++i) {
      const double original = values[i];
      values[i] = original + opt.eps;
      x.mutable_value().assign(Tensor64::from_host(x.shape(), values));
      const double plus = weighted_sum();
      values[i] = original - opt.eps;
      x.mutable_value().assign(Tensor64::from_host(x.shape(), values));
      const double minus = weighted_sum();
      values[i] = original;
      x.mutable_value().assign(Tensor64::from_host(x.shape(), values));

      const double numeric = (plus - minus) / (2 * opt.eps);
      const double err = std::abs(analytic[i] - numeric);
      const double excess = err - (opt.atol + opt.rtol * std::abs(numeric));
      ++result.checked;
      result.max_abs_error = std::max(result.max_abs_error, err);
      if (!std::isfinite(analytic[i]) || excess > worst_excess) {
        worst_excess = std::isfinite(analytic[i]) ? excess : INFINITY;
        std::ostringstream os;
        os << "input " << k << " (shape " << x.shape() << ") element " << i << ": analytic " << analytic[i]
           << ", numeric " << numeric << ", |diff| " << err;
        result.report = os.str();
      }
    }
  }
  result.ok = worst_excess <= 0;
  return result;
}

}  // namespace megacpp
