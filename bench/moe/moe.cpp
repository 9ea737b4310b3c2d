// bench/moe: the MoE feed-forward's costs on the CPU, each against its dense counterpart.
//
//   grouped GEMM   one grouped product (8 experts, uneven groups, one empty) forward + backward
//                  (Y = X_g W_g^T, dX, dW: 3 products) against one dense product of the same
//                  FLOPs, both through autograd (grouped_matmul, matmul). Target >= 0.85.
//                  Also on bf16 operands (MatmulPrecision::bf16, the experts under Bf16Mixed) on
//                  the CPU's bf16 GEMM path, printed (VDPBF16PS, or conversion to fp32).
//   MoE layer      MoE<float, Cpu> (router, dispatch, 2 grouped products, gates, combine)
//                  forward + backward against an MLP whose hidden width is top_k x the expert
//                  width: the same active FLOPs per token (the router's are extra). Target >= 0.75.
// Cases are timed round-robin (bench_common.hpp: time_interleaved) so ratios survive a noisy machine.
#include "bench_common.hpp"

#include <cinttypes>

#include "moe/uneven_groups.hpp"

using namespace megacpp;

namespace {
constexpr index_t kTokens = 4096, kModel = 256, kExperts = 8, kTopK = 2, kExpertHidden = 512;
}  // namespace

int main(int argc, char** argv) {
  const bench::BenchArgs args = bench::parse_args(argc, argv);
  char config[256];
  std::snprintf(config, sizeof config,
                "float, %" PRId64 " tokens, d_model %" PRId64 ", %" PRId64 " experts of %" PRId64 ", top-%" PRId64
                " (SoftmaxTopK, balance loss on); dense MLP %" PRId64 " wide",
                kTokens, kModel, kExperts, kExpertHidden, kTopK, kTopK * kExpertHidden);
  bench::print_system_info("moe", config, args);
  const double peak_start = bench::fma_peak_gflops();
  std::printf("fp32 FMA peak: %.1f GFLOP/s measured over all threads\n", peak_start);
  Rng rng(1);

  // --- grouped vs dense GEMM: M = tokens * k rows, K = d_model, N = expert width ---
  const index_t M = kTokens * kTopK, K = kModel, N = kExpertHidden;
  const std::vector<index_t> offsets = bench::uneven_offsets(M);
  std::printf("\ngrouped product: M %" PRId64 " rows in groups", M);
  for (std::size_t g = 0; g + 1 < offsets.size(); ++g) std::printf(" %" PRId64, offsets[g + 1] - offsets[g]);
  std::printf(", K %" PRId64 ", N %" PRId64 "\n", K, N);
  auto x = Var<float, Cpu>::parameter(randn<float, Cpu>({M, K}, rng));
  auto w = Var<float, Cpu>::parameter(randn<float, Cpu>({kExperts, N, K}, rng, 0.05));
  auto w_dense = Var<float, Cpu>::parameter(randn<float, Cpu>({N, K}, rng, 0.05));
  const auto gy = randn<float, Cpu>({M, N}, rng);

  // --- MoE layer vs dense MLP ---
  MoEConfig mc{.d_model = kModel, .experts = kExperts, .top_k = kTopK, .expert_hidden = kExpertHidden};
  MoE<float, Cpu> moe(mc, rng);
  for (auto& e : moe.experts) e.proj.weight.var.mutable_value().assign(randn<float, Cpu>(e.proj.weight.shape(), rng, 0.05));
  MLP<float, Cpu> mlp(kModel, rng, kTopK * kExpertHidden);
  mlp.proj.weight.var.mutable_value().assign(randn<float, Cpu>(mlp.proj.weight.shape(), rng, 0.05));
  auto tokens = Var<float, Cpu>::parameter(randn<float, Cpu>({kTokens, kModel}, rng));
  const auto gt = randn<float, Cpu>({kTokens, kModel}, rng);
  auto zero_all = [&] {
    tokens.zero_grad();
    moe.for_each_param([](const std::string&, Param<float, Cpu>& p) { p.var.zero_grad(); });
    mlp.for_each_param([](const std::string&, Param<float, Cpu>& p) { p.var.zero_grad(); });
  };

  std::vector<bench::TimedCase> cases;
  cases.push_back({"grouped GEMM f+b", [&] {
                     Var<float, Cpu> y = grouped_matmul(x, w, offsets);
                     backward(y, gy);
                   },
                   [&] { x.zero_grad(); w.zero_grad(); }});
  cases.push_back({"grouped bf16 f+b", [&] {
                     const MatmulPrecisionScope bf16_products(MatmulPrecision::bf16);
                     Var<float, Cpu> y = grouped_matmul(x, w, offsets);
                     backward(y, gy);
                   },
                   [&] { x.zero_grad(); w.zero_grad(); }});
  cases.push_back({"dense GEMM f+b", [&] {
                     Var<float, Cpu> y = matmul(x, w_dense, false, true);
                     backward(y, gy);
                   },
                   [&] { x.zero_grad(); w_dense.zero_grad(); }});
  cases.push_back({"MoE layer f+b", [&] {
                     AuxLosses<float, Cpu> aux;
                     Var<float, Cpu> y = moe.forward(tokens, aux);
                     backward(y, gt);
                   }, zero_all});
  cases.push_back({"dense MLP f+b", [&] {
                     Var<float, Cpu> y = mlp.forward(tokens);
                     backward(y, gt);
                   }, zero_all});
  cases.push_back({"MoE layer fwd", [&] {
                     NoGrad no_grad;
                     moe.forward(tokens);
                   }});
  cases.push_back({"dense MLP fwd", [&] {
                     NoGrad no_grad;
                     mlp.forward(tokens);
                   }});
  const std::vector<bench::Timing> t = bench::time_interleaved(cases, args.quick ? 0.2 : 1.5, args.quick ? 2 : 5);

  const double gemm_flops = 3 * 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  const double grouped_gflops = gemm_flops / t[0].median_s * 1e-9, dense_gflops = gemm_flops / t[2].median_s * 1e-9;
  const double grouped_bf16_gflops = gemm_flops / t[1].median_s * 1e-9;
  const double moe_tps = static_cast<double>(kTokens) / t[3].median_s, mlp_tps = static_cast<double>(kTokens) / t[4].median_s;
  std::printf("  %-18s %10s %10s %14s %5s\n", "case", "median ms", "min ms", "GFLOP/s|tok/s", "reps");
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const double figure = i < 3 ? gemm_flops / t[i].median_s * 1e-9 : static_cast<double>(kTokens) / t[i].median_s;
    std::printf("  %-18s %10.2f %10.2f %14.1f %5d\n", cases[i].name.c_str(), t[i].median_s * 1e3, t[i].min_s * 1e3,
                figure, t[i].reps);
  }
  std::printf("  grouped / dense GEMM: %.3f (target >= 0.85)\n", grouped_gflops / dense_gflops);
  std::printf("  MoE layer / dense MLP tokens/s (f+b, same active FLOPs): %.3f (target >= 0.75); forward only: %.3f\n",
              moe_tps / mlp_tps, t[6].median_s / t[5].median_s);
  const std::string_view bf16_path = cpu::bf16_gemm_path_name(cpu::bf16_gemm_path());
  std::printf("  grouped GEMM on bf16 operands (%.*s path): %.1f GFLOP/s, %.3f of fp32's\n",
              static_cast<int>(bf16_path.size()), bf16_path.data(), grouped_bf16_gflops, grouped_bf16_gflops / grouped_gflops);
  const MoELoad& load = moe.last_load();
  std::printf("  MoE load: min fraction %.3f, max fraction %.3f (balanced: %.3f)\n", load.min_fraction(),
              load.max_fraction(), 1.0 / static_cast<double>(kExperts));
  const double peak_end = bench::fma_peak_gflops();
  std::printf("\nfp32 FMA peak at the end: %.1f GFLOP/s (a change from the start means the machine changed state)\n",
              peak_end);

  bench::JsonLine json("moe");
  json.add("grouped_gemm_gflops", grouped_gflops, 1)
      .add("dense_gemm_gflops", dense_gflops, 1)
      .add("grouped_vs_dense", grouped_gflops / dense_gflops, 3)
      .add("grouped_gemm_bf16_gflops", grouped_bf16_gflops, 1)
      .add("bf16_gemm_path", bf16_path)
      .add("moe_layer_tokens_per_s", moe_tps, 0)
      .add("dense_mlp_tokens_per_s_same_active_flops", mlp_tps, 0)
      .add("moe_vs_dense_mlp", moe_tps / mlp_tps, 3)
      .add("threads", args.threads);
  json.print();
  return 0;
}
