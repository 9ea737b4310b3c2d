// tests/cuda/on_request_checks.hpp: the GPU checks of the CUDA backend's opt-in product paths, run
// by cuda_tests (test_cuda_backend.cu): TF32 float GEMMs (CudaTf32Products), and the MoE experts'
// grouped products in one launch per product (detail/grouped_gemm.cuh,
// cuda::moe::OneLaunchGroupedProducts; the same kernels run on the host emulation in every preset,
// tests/cuda_emulation/test_grouped_gemm.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "megacpp/backends/cuda.cuh"

namespace megacpp::backend_test {

// A (256, 256) x (256, 256) float product under CudaTf32Products is within TF32's error of the
// fp32 product and not bitwise it (the tensor cores ran); once the scope ends the fp32 product
// is back bit for bit.
inline std::string check_tf32_products() {
  constexpr index_t n = 256;
  Rng rng(9);
  const auto a = randn<float, Cuda>({n, n}, rng), b = randn<float, Cuda>({n, n}, rng);
  auto product = [&] {
    CudaTensor<float> c(Shape{n, n});
    Cuda::gemm<float>(GemmArgs::dense(false, false, n, n, n), 1.0f, a.data(), b.data(), 0.0f, c.data());
    return c.to_host();
  };
  const std::vector<float> exact = product();
  std::vector<float> tf32;
  {
    const CudaTf32Products on(true);
    tf32 = product();
  }
  if (product() != exact) return "the fp32 product changed after the TF32 scope ended";
  if (tf32 == exact) return "the TF32 scope changed nothing: the product did not run in TF32";
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < exact.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(tf32[i]) - exact[i]));
    scale = std::max(scale, std::abs(static_cast<double>(exact[i])));
  }
  // Each input keeps 11 significant bits (2^-11 relative); 256 terms of unit variance.
  if (worst > 1e-2 * scale) return "TF32 differs from fp32 by " + std::to_string(worst) + " at scale " + std::to_string(scale);
  return "";
}

// GroupedGemm on bf16 operands inside a cuda::moe::OneLaunchGroupedProducts scope (one grid of
// tensor-core tiles per product over every group, detail/grouped_gemm.cuh) against the per-group
// cuBLAS products outside it, which the backend cases hold to the CPU: forward (Y starting as NaN,
// so an element no tile wrote shows), and dX and dW added into non-zero gradients, within fp32
// sums' rounding; the same bits run to run. Groups empty, of one row, past a tile, with partial
// steps and column tiles (K 80, N 96); 8 uneven groups of 4,096 rows at the bench's K 512 and
// N 1024 (where the two paths' sums must differ somewhere: the one-launch kernels ran); and the
// bench's 64 small uneven groups (K 512, N 256).
inline std::string check_one_launch_grouped_products() {
  struct Problem {
    std::vector<index_t> offsets;
    index_t k, n;
  };
  // 64 groups of g * 5 mod 7 parts of 8,192 rows (189 parts: groups 0, 7, ... empty, the last
  // taking the remainder), bench_moe_cuda's 64 experts (bench/moe/uneven_groups.hpp)
  std::vector<index_t> many{0};
  for (index_t g = 0; g < 64; ++g) many.push_back(many.back() + 8192 * (g * 5 % 7) / 189);
  many.back() = 8192;
  const std::vector<Problem> problems{{{0, 0, 1, 131, 195, 202}, 80, 96},
                                      {{0, 700, 700, 1500, 1501, 2200, 2900, 3500, 4096}, 512, 1024},
                                      {many, 512, 256}};
  for (std::size_t pi = 0; pi < problems.size(); ++pi) {
    const Problem& pr = problems[pi];
    const index_t groups = static_cast<index_t>(pr.offsets.size()) - 1, rows = pr.offsets.back();
    const kernels::GroupedGemmParams p{groups, pr.k, pr.n, pr.offsets.data()};
    Rng rng(23);
    const CudaTensor<bf16> x = randn<float, Cuda>({rows, pr.k}, rng).template to<bf16>();
    const CudaTensor<bf16> w = randn<float, Cuda>({groups, pr.n, pr.k}, rng).template to<bf16>();
    const CudaTensor<bf16> dy = randn<float, Cuda>({rows, pr.n}, rng).template to<bf16>();
    const CudaTensor<float> dx0 = randn<float, Cuda>({rows, pr.k}, rng), dw0 = randn<float, Cuda>({groups, pr.n, pr.k}, rng);
    const auto run = [&](bool one_launch) {
      const cuda::moe::OneLaunchGroupedProducts scope(one_launch);
      CudaTensor<float> y = CudaTensor<float>::full(Shape{rows, pr.n}, std::numeric_limits<float>::quiet_NaN());
      CudaTensor<float> dx = dx0.clone(), dw = dw0.clone();
      if (one_launch && !(cuda::moe::grouped_product_fits(p, x.data(), w.data(), nullptr, y.data()) &&
                          cuda::moe::grouped_product_fits(p, x.data(), w.data(), dy.data(), dx.data(), dw.data())))
        throw Error("one-launch grouped products", "they do not take this shape or these pointers (K " +
                                                       std::to_string(pr.k) + ", N " + std::to_string(pr.n) + ")");
      kernels::GroupedGemm<Cuda>::forward<float, bf16>(p, {x.data(), w.data(), y.data()});
      kernels::GroupedGemm<Cuda>::backward<float, bf16>(p, {x.data(), w.data(), nullptr},
                                                        {dy.data(), dx.data(), dw.data()});
      return std::vector<std::vector<float>>{y.to_host(), dx.to_host(), dw.to_host()};
    };
    const auto per_group = run(false), one_launch = run(true);
    if (run(true) != one_launch) return "the one-launch products are not reproducible run to run";
    const char* names[] = {"Y", "dX", "dW"};
    index_t largest_group = 0;
    for (index_t g = 0; g < groups; ++g) largest_group = std::max(largest_group, pr.offsets[g + 1] - pr.offsets[g]);
    const index_t summed[] = {pr.k, pr.n, largest_group};
    bool any_difference = false;
    for (std::size_t i = 0; i < 3; ++i) {
      double worst = 0, scale = 1;
      for (std::size_t e = 0; e < per_group[i].size(); ++e) {
        const double got = one_launch[i][e], want = per_group[i][e];
        if (!std::isfinite(got) || !std::isfinite(want))
          return std::string(names[i]) + " is not finite at element " + std::to_string(e) + " (problem " +
                 std::to_string(pi) + ")";
        worst = std::max(worst, std::abs(got - want));
        scale = std::max(scale, std::abs(want));
        any_difference = any_difference || got != want;
      }
      std::printf("  one-launch grouped %s (problem %zu, K %lld, N %lld): largest difference %.2e of %.2e\n", names[i],
                  pi, static_cast<long long>(pr.k), static_cast<long long>(pr.n), worst, scale);
      // Sums of `summed` exact products of unit-variance bf16 values, in fp32, in two orders.
      if (!(worst <= 1e-5 * scale * std::sqrt(static_cast<double>(summed[i]))))
        return std::string(names[i]) + " differs from the per-group products by " + std::to_string(worst) +
               " (problem " + std::to_string(pi) + ")";
    }
    if (pi == 1 && !any_difference) return "the one-launch scope changed no bit of 4M outputs: its kernels did not run";
  }
  return "";
}

}  // namespace megacpp::backend_test
