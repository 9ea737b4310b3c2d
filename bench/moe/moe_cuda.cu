// bench/moe/moe_cuda.cu: the MoE feed-forward on one GPU (the CUDA backend: GroupedGemm<Cuda>,
// one cuBLAS GEMM per non-empty group, or on bf16 operands one launch per product over every
// group inside a cuda::moe::OneLaunchGroupedProducts scope; cuBLAS for the router;
// GatedCombine<Cuda>).
//
// Shape: 16384 tokens, d_model 512, 8 experts of 1024 (top-2, SoftmaxTopK), so the first grouped
// product is M 32768 rows in uneven groups (5:1:3:0:2:6:1:2, one empty), K 512, N 1024. Median of
// 10 after two warm-ups (CUDA events) of:
//   1. the grouped product forward + backward (3 products per group), fp32 and bf16 operands
//      (MatmulPrecision::bf16: the MoE experts' products under Bf16Mixed), in TFLOP/s;
//   2. one dense product of the same FLOPs in bf16 (matmul), the grouped product's ceiling;
//   3. the bf16 grouped product in one launch per product (detail/grouped_gemm.cuh) against the
//      per-group cuBLAS products, on these 8 groups and on 64 small uneven groups (8192 rows: a
//      fine-grained MoE's experts, ~130 rows each), `cuda_one_launch_vs_per_group_bf16*` the ratio
//      of times (above 1: one launch is faster);
//   4. the MoE layer's forward + backward in fp32 and under bf16 products (per group and one
//      launch), in tokens/s.
// Prints "no CUDA device: bench skipped" without a GPU; ends with one JSON line.
#include <cstdio>
#include <string>
#include <vector>

#include "cuda_bench.cuh"
#include "moe/uneven_groups.hpp"
#include "megacpp/autograd.hpp"
#include "megacpp/nn/moe.hpp"

namespace {

using namespace megacpp;
using V = Var<float, Cuda>;
// (plain `cuda::` is ambiguous here with CCCL's namespace)
using OneLaunchGroupedProducts = megacpp::cuda::moe::OneLaunchGroupedProducts;

constexpr index_t kTokens = 16384, kModel = 512, kExperts = 8, kTopK = 2, kExpertHidden = 1024;

}  // namespace

int main() {
  if (!bench::cuda_bench_start("moe_cuda", "MoE<float, Cuda>: 16384 tokens, d_model 512, 8 experts of 1024, top-2 "
                                           "(SoftmaxTopK); grouped product M 32768 x K 512 x N 1024, fp32 and bf16 "
                                           "(bf16 per group and in one launch); 64 experts M 8192 x K 512 x N 256"))
    return 0;
  Rng rng(1);
  const index_t M = kTokens * kTopK, K = kModel, N = kExpertHidden;
  const std::vector<index_t> offsets = bench::uneven_offsets(M);
  V x = V::parameter(randn<float, Cuda>({M, K}, rng));
  V w = V::parameter(randn<float, Cuda>({kExperts, N, K}, rng, 0.05));
  V w_dense = V::parameter(randn<float, Cuda>({N, K}, rng, 0.05));
  const auto gy = randn<float, Cuda>({M, N}, rng);

  MoEConfig mc{.d_model = kModel, .experts = kExperts, .top_k = kTopK, .expert_hidden = kExpertHidden};
  MoE<float, Cuda> moe(mc, rng);
  for (auto& e : moe.experts) e.proj.weight.var.mutable_value().assign(randn<float, Cuda>(e.proj.weight.shape(), rng, 0.05));
  V tokens = V::parameter(randn<float, Cuda>({kTokens, kModel}, rng));
  const auto gt = randn<float, Cuda>({kTokens, kModel}, rng);

  auto grouped = [&](MatmulPrecision precision, bool one_launch = false) {
    return bench::median_ms([&] {
      x.zero_grad();
      w.zero_grad();
      const MatmulPrecisionScope scope(precision);
      const OneLaunchGroupedProducts launches(one_launch);
      V y = grouped_matmul(x, w, offsets);
      backward(y, gy);
    });
  };
  // 64 small experts: 8192 rows of K 512 into N 256.
  constexpr index_t kManyExperts = 64, kManyRows = 8192, kSmallHidden = 256;
  const std::vector<index_t> many_offsets = bench::many_uneven_offsets(kManyRows, kManyExperts);
  V x_many = V::parameter(randn<float, Cuda>({kManyRows, K}, rng));
  V w_many = V::parameter(randn<float, Cuda>({kManyExperts, kSmallHidden, K}, rng, 0.05));
  const auto gy_many = randn<float, Cuda>({kManyRows, kSmallHidden}, rng);
  auto grouped_many = [&](bool one_launch) {
    return bench::median_ms([&] {
      x_many.zero_grad();
      w_many.zero_grad();
      const MatmulPrecisionScope scope(MatmulPrecision::bf16);
      const OneLaunchGroupedProducts launches(one_launch);
      V y = grouped_matmul(x_many, w_many, many_offsets);
      backward(y, gy_many);
    });
  };
  auto layer = [&](MatmulPrecision precision, bool one_launch = false) {
    return bench::median_ms([&] {
      tokens.zero_grad();
      moe.for_each_param([](const std::string&, Param<float, Cuda>& p) { p.var.zero_grad(); });
      const MatmulPrecisionScope scope(precision);
      const OneLaunchGroupedProducts launches(one_launch);
      AuxLosses<float, Cuda> aux;
      V y = moe.forward(tokens, aux);
      backward(y, gt);
    });
  };
  // The one-launch figures time the one-launch kernels only if they take these shapes (the buffers
  // come from the allocator, 256-byte aligned); else they would time the per-group products again.
  const auto one_launch_takes = [](const std::vector<index_t>& o, index_t k, index_t n) {
    return megacpp::cuda::moe::grouped_product_fits({static_cast<index_t>(o.size()) - 1, k, n, o.data()}, nullptr,
                                                    nullptr, nullptr, nullptr);
  };
  check(one_launch_takes(offsets, K, N) && one_launch_takes(offsets, N, K) && one_launch_takes(many_offsets, K, kSmallHidden),
        "bench_moe_cuda", "the one-launch grouped products do not take the bench's shapes");
  const double grouped_fp32 = grouped(MatmulPrecision::fp32), grouped_bf16 = grouped(MatmulPrecision::bf16);
  const double grouped_bf16_one = grouped(MatmulPrecision::bf16, true);
  const double many_bf16 = grouped_many(false), many_bf16_one = grouped_many(true);
  const double dense_bf16 = bench::median_ms([&] {
    x.zero_grad();
    w_dense.zero_grad();
    const MatmulPrecisionScope scope(MatmulPrecision::bf16);
    V y = matmul(x, w_dense, false, true);
    backward(y, gy);
  });
  const double layer_fp32 = layer(MatmulPrecision::fp32), layer_bf16 = layer(MatmulPrecision::bf16);
  const double layer_bf16_one = layer(MatmulPrecision::bf16, true);

  const double flops = 3 * 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  const auto tflops = [&](double ms) { return flops / (ms * 1e-3) * 1e-12; };
  const double many_flops = 3 * 2.0 * static_cast<double>(kManyRows) * static_cast<double>(kSmallHidden) *
                            static_cast<double>(K);
  const auto many_tflops = [&](double ms) { return many_flops / (ms * 1e-3) * 1e-12; };
  const auto per_s = [&](double ms) { return static_cast<double>(kTokens) / (ms * 1e-3); };
  std::printf("\n  %-30s %10s %14s\n", "case", "median ms", "TFLOP/s|tok/s");
  std::printf("  %-30s %10.3f %14.1f\n", "grouped f+b fp32", grouped_fp32, tflops(grouped_fp32));
  std::printf("  %-30s %10.3f %14.1f\n", "grouped f+b bf16", grouped_bf16, tflops(grouped_bf16));
  std::printf("  %-30s %10.3f %14.1f\n", "grouped f+b bf16, one launch", grouped_bf16_one, tflops(grouped_bf16_one));
  std::printf("  %-30s %10.3f %14.1f\n", "dense f+b bf16 (same FLOPs)", dense_bf16, tflops(dense_bf16));
  std::printf("  %-30s %10.3f %14.1f\n", "64 experts f+b bf16", many_bf16, many_tflops(many_bf16));
  std::printf("  %-30s %10.3f %14.1f\n", "64 experts f+b bf16, one launch", many_bf16_one, many_tflops(many_bf16_one));
  std::printf("  %-30s %10.3f %14.0f\n", "MoE layer f+b fp32", layer_fp32, per_s(layer_fp32));
  std::printf("  %-30s %10.3f %14.0f\n", "MoE layer f+b bf16", layer_bf16, per_s(layer_bf16));
  std::printf("  %-30s %10.3f %14.0f\n", "MoE layer f+b bf16, one launch", layer_bf16_one, per_s(layer_bf16_one));
  std::printf("  grouped / dense (bf16): %.3f\n", dense_bf16 / grouped_bf16);
  std::printf("  speed-up of one launch over per group (bf16): %.3f (8 experts), %.3f (64 experts)\n",
              grouped_bf16 / grouped_bf16_one, many_bf16 / many_bf16_one);
  bench::JsonLine json("moe_cuda");
  json.add("device", std::string_view("cuda"))
      .add("cuda_grouped_fp32_tflops", tflops(grouped_fp32), 2)
      .add("cuda_grouped_bf16_tflops", tflops(grouped_bf16), 2)
      .add("cuda_dense_bf16_tflops", tflops(dense_bf16), 2)
      .add("cuda_grouped_vs_dense_bf16", dense_bf16 / grouped_bf16, 3)
      .add("cuda_grouped_bf16_one_launch_tflops", tflops(grouped_bf16_one), 2)
      .add("cuda_one_launch_vs_per_group_bf16", grouped_bf16 / grouped_bf16_one, 3)
      .add("cuda_grouped_bf16_tflops_E64", many_tflops(many_bf16), 2)
      .add("cuda_grouped_bf16_one_launch_tflops_E64", many_tflops(many_bf16_one), 2)
      .add("cuda_one_launch_vs_per_group_bf16_E64", many_bf16 / many_bf16_one, 3)
      .add("cuda_moe_fwd_bwd_tokens_per_s_fp32", per_s(layer_fp32), 0)
      .add("cuda_moe_fwd_bwd_tokens_per_s_bf16", per_s(layer_bf16), 0)
      .add("cuda_moe_fwd_bwd_tokens_per_s_bf16_one_launch", per_s(layer_bf16_one), 0);
  json.print();
  return 0;
}
