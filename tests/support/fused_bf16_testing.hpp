// tests/support/fused_bf16_testing.hpp: checks that a fused op under bf16 products gives the bits
// of the ops it replaces (output and both gradients) and holds less memory between forward and
// backward. Used for relu2_linear_bf16 (tests/model/test_precision.cpp) and
// relu2_grouped_matmul_bf16 (tests/moe/test_moe.cpp).
#pragma once

#include "support/op_testing.hpp"

#include <array>
#include <cstddef>
#include <cstring>
#include <vector>

namespace megacpp::testing {

/// y, du and dW on the host.
using OutputAndGradients = std::array<std::vector<float>, 3>;

/// y = op(u, w) under bf16 products, then the backward of sum(y g) outside the scope (an op keeps
/// the precision it was created under); u's and w's gradients start from zero.
template <class Op>
OutputAndGradients bf16_output_and_gradients(const Var<float, Cpu>& u, const Var<float, Cpu>& w,
                                             const Var<float, Cpu>& g, Op op) {
  auto uu = u, ww = w;
  uu.zero_grad();
  ww.zero_grad();
  Var<float, Cpu> y;
  {
    const MatmulPrecisionScope bf16_products(MatmulPrecision::bf16);
    y = op(u, w);
  }
  backward(sum(mul(y, g)));
  return {y.value().to_host(), u.grad().to_host(), w.grad().to_host()};
}

/// Every one of y, du and dW has the same bits in both.
inline void check_same_bits(const OutputAndGradients& separate, const OutputAndGradients& fused) {
  for (std::size_t i = 0; i < fused.size(); ++i) {
    INFO("output " << i << " (y, du, dW)");
    REQUIRE(separate[i].size() == fused[i].size());
    CHECK(std::memcmp(separate[i].data(), fused[i].data(), fused[i].size() * sizeof(float)) == 0);
  }
}

/// Bytes of CPU memory that y = forward() (under bf16 products) holds once it returns: its value
/// and whatever its graph saved for the backward.
template <class Forward>
std::size_t bf16_bytes_held_after_forward(Forward forward) {
  const std::size_t before = Cpu::memory_stats().current_bytes;
  const MatmulPrecisionScope bf16_products(MatmulPrecision::bf16);
  const Var<float, Cpu> y = forward();
  return Cpu::memory_stats().current_bytes - before;
}

}  // namespace megacpp::testing
