// tests/support/fused_bf16_testing.hpp: checks that a fused op under bf16 products gives the bits
// of the ops it replaces (output and every input's gradient, over one or more backward passes) and
// holds less memory between forward and backward. Used for relu2_linear_bf16 and relu2_mlp_bf16
// (tests/model/test_precision.cpp), and the grouped products (tests/moe/test_moe.cpp).
#pragma once

#include "support/op_testing.hpp"

#include <cstddef>
#include <cstring>
#include <vector>

namespace megacpp::testing {

/// y, then each input's gradient, on the host.
using OutputAndGradients = std::vector<std::vector<float>>;

/// y = op() under bf16 products, then the backward of sum(y g) outside the scope (an op keeps the
/// precision it was created under), `passes` times: the first into zeroed gradients of `inputs`,
/// the later ones adding into them (gradient accumulation). The last pass's y and the gradients.
template <class Op>
OutputAndGradients bf16_output_and_gradients(const std::vector<Var<float, Cpu>>& inputs, const Var<float, Cpu>& g, Op op,
                                              int passes = 1) {
  for (Var<float, Cpu> v : inputs) v.zero_grad();
  Var<float, Cpu> y;
  for (int pass = 0; pass < passes; ++pass) {
    {
      const MatmulPrecisionScope bf16_products(MatmulPrecision::bf16);
      y = op();
    }
    backward(sum(mul(y, g)));
  }
  OutputAndGradients out{y.value().to_host()};
  for (const Var<float, Cpu>& v : inputs) out.push_back(v.grad().to_host());
  return out;
}

/// y and every gradient have the same bits in both.
inline void check_same_bits(const OutputAndGradients& separate, const OutputAndGradients& fused) {
  REQUIRE(separate.size() == fused.size());
  for (std::size_t i = 0; i < fused.size(); ++i) {
    INFO("output " << i << " (y, then each input's gradient)");
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
