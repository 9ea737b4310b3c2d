// Shared test helper: what a backend-independent test case runs in and how its results are
// compared (one harness for tests/cuda/backend_cases.hpp's op table and the kernel cases).
//
// A case draws its inputs on the host from a seeded Rng (so every backend sees bitwise the same
// data), runs on backend B in T, and returns its results as doubles: the forward value, then the
// gradient of each input for a random upstream gradient (ggml's test-backend-ops shape: every op
// backend against backend). This header includes no backend and no test framework, so nvcc
// compiles it for the CUDA test as g++ does for the CPU tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <vector>

#include "megacpp/autograd.hpp"

namespace megacpp::testing {

// The results of one case: each output or gradient, flattened row-major, as doubles.
using Outputs = std::vector<std::vector<double>>;

// The inputs and the upstream gradient of a case, drawn from one seeded generator in the order the
// case asks for them.
template <class T, Backend B>
class Harness {
 public:
  using Tens = Tensor<T, B>;
  using V = Var<T, B>;

  explicit Harness(std::uint64_t seed) : rng_(seed) {}

  Tens uniform(Shape s, double lo = -1.0, double hi = 1.0) { return rand_uniform<T, B>(s, rng_, lo, hi); }
  V param(Shape s, double lo = -1.0, double hi = 1.0) { return V::parameter(uniform(s, lo, hi)); }
  Tens filled(Shape s, T value) { return Tens::full(s, value); }
  Tensor<std::int32_t, B> ids(Shape s, std::int32_t limit) {
    std::vector<std::int32_t> v(static_cast<std::size_t>(s.numel()));
    for (auto& x : v) x = static_cast<std::int32_t>(rng_.below(static_cast<std::uint64_t>(limit)));
    return Tensor<std::int32_t, B>::from_host(s, v);
  }

  // Backpropagates a random upstream gradient from y; returns y, then each input's gradient
  // (zeros for inputs that received none).
  Outputs finish(V y, const std::vector<V>& inputs) {
    const Tens gy = uniform(y.shape());
    backward(y, gy);
    Outputs out{doubles(y.value())};
    for (const V& x : inputs)
      out.push_back(x.grad().defined() ? doubles(x.grad()) : std::vector<double>(static_cast<std::size_t>(x.numel()), 0.0));
    return out;
  }
  Outputs finish(V y, std::initializer_list<V> inputs) { return finish(std::move(y), std::vector<V>(inputs)); }
  // Outputs of kernel-level cases: the buffers the kernels wrote.
  static Outputs values(std::initializer_list<Tens> tensors) {
    Outputs out;
    for (const Tens& t : tensors) out.push_back(doubles(t));
    return out;
  }
  template <class U>
  static std::vector<double> doubles(const Tensor<U, B>& t) {
    std::vector<double> out;
    for (const U& x : t.to_host()) out.push_back(static_cast<double>(x));
    return out;
  }

 private:
  Rng rng_;
};

// How close two results must be, per element type: element i of an output passes when
//   |got_i - want_i| <= rtol * (|want_i| + max_j |want_j|),
// so elements that cancel to near zero are judged at the output's scale.
struct Tolerance {
  double float_rtol = 0.0;   // for T = float
  double double_rtol = 0.0;  // for T = double
  template <class T>
  double rtol() const {
    return std::is_same_v<T, double> ? double_rtol : float_rtol;
  }
};

// Backend against backend, the same inputs: only summation order may differ.
inline constexpr Tolerance kBackendTolerance{1e-5, 1e-10};

namespace detail {
inline std::string describe_element(std::size_t output, std::size_t index, double got, double want) {
  return "output " + std::to_string(output) + " element " + std::to_string(index) + ": got " + std::to_string(got) +
         ", reference " + std::to_string(want) + ", |diff| " + std::to_string(std::abs(got - want));
}
}  // namespace detail

// "" when every element of `got` is within rtol of `want` (see Tolerance); otherwise the worst
// element. NaN must meet NaN and infinities must be equal; rtol 0 asks for bitwise equal values.
inline std::string compare_outputs(const Outputs& got, const Outputs& want, double rtol) {
  if (got.size() != want.size())
    return std::to_string(got.size()) + " outputs, reference has " + std::to_string(want.size());
  std::string worst;
  double worst_excess = 0;
  for (std::size_t k = 0; k < want.size(); ++k) {
    if (got[k].size() != want[k].size())
      return "output " + std::to_string(k) + " has " + std::to_string(got[k].size()) + " elements, reference " +
             std::to_string(want[k].size());
    double scale = 0;
    for (double w : want[k])
      if (std::isfinite(w)) scale = std::max(scale, std::abs(w));
    for (std::size_t i = 0; i < want[k].size(); ++i) {
      const double g = got[k][i], w = want[k][i];
      if (std::isnan(g) || std::isnan(w) || std::isinf(g) || std::isinf(w)) {
        if (!(std::isnan(g) && std::isnan(w)) && g != w) return detail::describe_element(k, i, g, w);
        continue;
      }
      const double excess = std::abs(g - w) - rtol * (std::abs(w) + scale);
      if (excess > worst_excess) {
        worst_excess = excess;
        worst = detail::describe_element(k, i, g, w);
      }
    }
  }
  return worst;
}

}  // namespace megacpp::testing
