// bench/train_step/mlp_fusion.hpp: the dense model's MLP (x (batch, seq, d) -> hidden 4 d -> d)
// forward and backward under bf16 products, on any backend, for bench_train_step and
// bench_train_step_cuda: the whole MLP as one op (relu2_mlp_bf16, what MLP::forward runs) or fc's
// product followed by relu2_linear_bf16 (relu2's gradient written in fp32, then rounded by fc's
// backward).
#pragma once

#include "megacpp/autograd/backward.hpp"
#include "megacpp/autograd/ops/reduce.hpp"
#include "megacpp/autograd/ops/relu2_linear.hpp"
#include "megacpp/core/random.hpp"

namespace megacpp::bench {

template <Backend B>
struct MlpFusionProblem {
  Var<float, B> x, w_fc, w_proj;

  MlpFusionProblem(index_t batch, index_t seq, index_t d) {
    Rng rng(4);
    x = Var<float, B>::parameter(randn<float, B>({batch, seq, d}, rng));
    w_fc = Var<float, B>::parameter(randn<float, B>({4 * d, d}, rng, 0.05));
    w_proj = Var<float, B>::parameter(randn<float, B>({d, 4 * d}, rng, 0.05));
  }

  /// One forward and backward from zeroed gradients, as one op (fused) or two.
  void pass(bool fused) {
    for (Var<float, B>* v : {&x, &w_fc, &w_proj}) v->zero_grad();
    Var<float, B> y;
    {
      const MatmulPrecisionScope bf16_products(MatmulPrecision::bf16);
      y = fused ? relu2_mlp_bf16(x, w_fc, w_proj) : relu2_linear_bf16(matmul(x, w_fc, false, true), w_proj);
    }
    backward(sum(y));
  }
};

}  // namespace megacpp::bench
