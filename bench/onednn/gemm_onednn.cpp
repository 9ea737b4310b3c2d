// bench_gemm_onednn: megacpp's GEMMs (Cpu::gemm_bf16 and Cpu::gemm<float>) against oneDNN's
// matmul primitive (Debian libdnnl 2.6, its brgemm kernels) on the same operands, layouts and
// threads: the products of one training step of the dense bench model (bench/train_step: tokens
// 4096, d 512, MLP 2048, a 1024-row chunk of the 8192-word head) in their three layouts
// (x W^T forward, dY W for dX, dY^T X for dW), plus 2048^3.
//
// Why: issue 20 accepts oneDNN for any path where it measures faster than megacpp's own kernel;
// this is the measurement. Each pair is timed round-robin (bench_common.hpp), so both see the
// same machine state; the figure is the ratio of the two sums of median times over the shapes,
// as a step runs them.
#include <oneapi/dnnl/dnnl.hpp>

#include <cstdio>
#include <vector>

#include "bench_common.hpp"

using namespace megacpp;

namespace {

struct Product {
  const char* name;
  index_t m, n, k;
  bool trans_a, trans_b;
};

// The dense bench model's products (rows = tokens 4096, or a head chunk of 1024 rows).
constexpr Product kProducts[] = {
    {"q/o proj  x W^T", 4096, 512, 512, false, true},   {"mlp up    x W^T", 4096, 2048, 512, false, true},
    {"mlp down  x W^T", 4096, 512, 2048, false, true},  {"mlp up dX dY W", 4096, 512, 2048, false, false},
    {"mlp up dW dY^T X", 2048, 512, 4096, true, false}, {"q/o dW    dY^T X", 512, 512, 4096, true, false},
    {"head      x W^T", 1024, 8192, 512, false, true},  {"head dX   dZ W", 1024, 512, 8192, false, false},
    {"head dW   dZ^T X", 8192, 512, 1024, true, false}, {"square    2048^3", 2048, 2048, 2048, false, false},
};

struct Sums {
  double megacpp_s = 0, onednn_s = 0, gflop = 0;
};

template <class T>
void compare(const bench::BenchArgs& args, const dnnl::engine& engine, dnnl::stream& stream, const Product& p, Sums& sums) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  constexpr bool is_bf16 = std::is_same_v<T, bf16>;
  Rng rng(7);
  const auto a32 = randn<float, Cpu>({p.m * p.k}, rng).to_host(), b32 = randn<float, Cpu>({p.k * p.n}, rng).to_host();
  std::vector<T> a(a32.size()), b(b32.size());
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = T(a32[i]);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = T(b32[i]);
  std::vector<float> c(static_cast<std::size_t>(p.m * p.n)), c_onednn(c.size());
  const GemmArgs g = GemmArgs::dense(p.trans_a, p.trans_b, p.m, p.n, p.k);
  // oneDNN: src (m, k), weights (k, n), dst (m, n) f32; a transposed operand is the "ba" layout
  const dt in = is_bf16 ? dt::bf16 : dt::f32;
  const dnnl::memory::desc a_md({p.m, p.k}, in, p.trans_a ? tag::ba : tag::ab);
  const dnnl::memory::desc b_md({p.k, p.n}, in, p.trans_b ? tag::ba : tag::ab);
  const dnnl::memory::desc c_md({p.m, p.n}, dt::f32, tag::ab);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), engine);
  const dnnl::matmul matmul(pd);
  dnnl::memory a_mem(a_md, engine, a.data()), b_mem(b_md, engine, b.data()), c_mem(c_md, engine, c_onednn.data());
  const auto t = bench::time_interleaved(
      {{"megacpp",
        [&] {
          if constexpr (is_bf16) Cpu::gemm_bf16(g, 1.0f, a.data(), b.data(), 0.0f, c.data());
          else Cpu::gemm<float>(g, 1.0f, a.data(), b.data(), 0.0f, c.data());
        }},
       {"onednn",
        [&] {
          matmul.execute(stream, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
          stream.wait();
        }}},
      args.quick ? 0.05 : 0.6, args.quick ? 2 : 7);
  // the two results agree to fp32 summation order: a wrong layout would differ by O(1)
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < c.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(c[i] - c_onednn[i])));
    scale = std::max(scale, static_cast<double>(std::abs(c_onednn[i])));
  }
  if (!(worst <= 1e-3 * scale)) fail("bench_gemm_onednn", p.name, ": megacpp and oneDNN differ by ", worst, " (max |c| ", scale, ")");
  const double gflop = 2.0 * static_cast<double>(p.m * p.n * p.k) * 1e-9;
  std::printf("  %-17s %5ld %5ld %5ld  megacpp %7.1f  oneDNN %7.1f GFLOP/s  (%s)\n", p.name, static_cast<long>(p.m),
              static_cast<long>(p.n), static_cast<long>(p.k), gflop / t[0].median_s, gflop / t[1].median_s,
              pd.impl_info_str());
  sums.megacpp_s += t[0].median_s;
  sums.onednn_s += t[1].median_s;
  sums.gflop += gflop;
}

}  // namespace

int main(int argc, char** argv) {
  const bench::BenchArgs args = bench::parse_args(argc, argv);
  bench::print_system_info("gemm_onednn",
                           "megacpp Cpu::gemm_bf16 / Cpu::gemm<float> vs oneDNN matmul (f32 C), the dense bench "
                           "model's products in their three layouts and 2048^3, timed round-robin",
                           args);
  const dnnl::version_t* v = dnnl_version();
  std::printf("oneDNN:        %d.%d.%d (CPU runtime %s)\n", v->major, v->minor, v->patch,
              v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other");
  std::printf("bf16 GEMM path %.*s\n", static_cast<int>(cpu::bf16_gemm_path_name(cpu::bf16_gemm_path()).size()),
              cpu::bf16_gemm_path_name(cpu::bf16_gemm_path()).data());
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  Sums bf16_sums, fp32_sums;
  std::printf("bf16 operands, fp32 sums:\n");
  for (const Product& p : kProducts) compare<bf16>(args, engine, stream, p, bf16_sums);
  std::printf("fp32:\n");
  for (const Product& p : kProducts) compare<float>(args, engine, stream, p, fp32_sums);
  const double bf16_ours = bf16_sums.gflop / bf16_sums.megacpp_s, bf16_theirs = bf16_sums.gflop / bf16_sums.onednn_s;
  const double fp32_ours = fp32_sums.gflop / fp32_sums.megacpp_s, fp32_theirs = fp32_sums.gflop / fp32_sums.onednn_s;
  std::printf("all shapes: bf16 megacpp %.1f vs oneDNN %.1f GFLOP/s (%.3fx); fp32 megacpp %.1f vs oneDNN %.1f (%.3fx)\n",
              bf16_ours, bf16_theirs, bf16_ours / bf16_theirs, fp32_ours, fp32_theirs, fp32_ours / fp32_theirs);
  bench::JsonLine("gemm_onednn")
      .add("bf16_path", cpu::bf16_gemm_path_name(cpu::bf16_gemm_path()))
      .add("megacpp_bf16_gflops_model", bf16_ours, 1).add("onednn_bf16_gflops_model", bf16_theirs, 1)
      .add("megacpp_over_onednn_bf16", bf16_ours / bf16_theirs, 3)
      .add("megacpp_fp32_gflops_model", fp32_ours, 1).add("onednn_fp32_gflops_model", fp32_theirs, 1)
      .add("megacpp_over_onednn_fp32", fp32_ours / fp32_theirs, 3).add("threads", args.threads).print();
  return 0;
}
