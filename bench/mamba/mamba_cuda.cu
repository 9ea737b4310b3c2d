// bench/mamba/mamba_cuda.cu: the Mamba-3 mixer's training step on one GPU (the CUDA backend:
// SsmScan, SsmRotary and CausalConv1d of backends/cuda/kernels/, cuBLAS for the projections).
//
// The configuration of bench/mamba/mamba.cpp: Mamba3<float, Cuda, SISO> at the reference
// defaults (headdim 64, d_state 128, expand 2, rope_fraction 0.5), d_model 512 (16 heads),
// one row, one document; forward+backward of the whole layer from a fixed upstream gradient at
// T = 4K, 16K and 64K, median of 5 after one warm-up (CUDA events). Time per token that stays
// flat as T grows is linear scaling; the step's peak device memory is printed beside it.
//
// MEGACPP_PROFILE_STEP=1 marks one more T = 4K step inside cudaProfilerStart/Stop, for
// `ncu --profile-from-start off --print-summary per-kernel` (the layer's kernels, one step:
// scripts/cuda-check.sh runs it where ncu is found).
#include <cuda_profiler_api.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda_bench.cuh"
#include "megacpp/autograd/backward.hpp"
#include "megacpp/nn/mamba.hpp"

namespace {

using namespace megacpp;
using V = Var<float, Cuda>;
using Layer = Mamba3<float, Cuda, SISO>;

constexpr index_t kDModel = 512, kProfiledT = 4096;

struct Result {
  index_t T = 0;
  double us_per_token = 0, fwd_us_per_token = 0, peak_mb = 0;
};

Result run(Layer& layer, index_t T) {
  std::vector<Param<float, Cuda>*> params;
  layer.for_each_param([&](const std::string&, Param<float, Cuda>& p) { params.push_back(&p); });
  Rng rng(static_cast<std::uint64_t>(T));
  const auto docs = DocumentLayout<Cuda>::single_document(1, T);
  V u = V::parameter(randn<float, Cuda>({1, T, kDModel}, rng));
  const auto upstream = randn<float, Cuda>({1, T, kDModel}, rng, 1e-3);
  auto step = [&] {
    for (auto* p : params) p->var.zero_grad();
    u.zero_grad();
    V y = layer.forward(u, docs);
    backward(y, upstream);
  };
  Result r;
  r.T = T;
  Cuda::synchronize();
  Cuda::reset_peak_memory();
  const std::size_t before = Cuda::memory_stats().current_bytes;
  step();
  Cuda::synchronize();
  r.peak_mb = static_cast<double>(Cuda::memory_stats().peak_bytes - before) / (1024.0 * 1024.0);
  r.us_per_token = bench::median_ms(step, 1, 5) * 1e3 / static_cast<double>(T);
  r.fwd_us_per_token = bench::median_ms([&] { V y = layer.forward(u, docs); }, 1, 5) * 1e3 / static_cast<double>(T);
  if (T == kProfiledT && std::getenv("MEGACPP_PROFILE_STEP")) {
    MEGACPP_CUDA_CHECK(cudaProfilerStart());
    step();
    MEGACPP_CUDA_CHECK(cudaProfilerStop());
  }
  return r;
}

}  // namespace

int main() {
  if (!bench::cuda_bench_start("mamba_cuda", "Mamba3<float, Cuda, SISO>, d_model 512 (16 heads of 64, d_state 128), "
                                             "chunk 64, one row, one document; forward+backward per token"))
    return 0;
  Rng rng(1234);
  Mamba3Config cfg;
  cfg.d_model = kDModel;
  Layer layer(cfg, rng);
  // out_proj starts at zero; give it values so the backward does its full work.
  layer.out_proj.weight.var.mutable_value().assign(randn<float, Cuda>(layer.out_proj.weight.shape(), rng, 0.02));
  std::vector<Result> results;
  for (index_t T : {4096, 16384, 65536}) results.push_back(run(layer, T));
  std::printf("\n  %8s %16s %16s %12s\n", "T", "f+b us/token", "fwd us/token", "peak MiB");
  for (const Result& r : results)
    std::printf("  %8lld %16.3f %16.3f %12.1f\n", static_cast<long long>(r.T), r.us_per_token, r.fwd_us_per_token, r.peak_mb);
  const double linearity = results[2].us_per_token / results[0].us_per_token;
  std::printf("\nT=65536 / T=4096 time per token: %.3f (1.0 = linear in T)\n", linearity);
  bench::JsonLine json("mamba_cuda");
  json.add("device", std::string_view("cuda"))
      .add("cuda_us_per_token_T4096", results[0].us_per_token, 3)
      .add("cuda_us_per_token_T16384", results[1].us_per_token, 3)
      .add("cuda_us_per_token_T65536", results[2].us_per_token, 3)
      .add("cuda_fwd_us_per_token_T4096", results[0].fwd_us_per_token, 3)
      .add("cuda_per_token_T65536_vs_T4096", linearity, 3)
      .add("cuda_peak_mb_T65536", results[2].peak_mb, 1);
  json.print();
  return 0;
}
