// bench/gemm.cpp: GFLOP/s of megacpp's matmul op (the autograd path) and of Cpu::gemm beside Eigen's
// product called directly.
//
// For n in {1024, 2048}: C (n, n) = A (n, n) B (n, n) in fp32, five cases timed round-robin
// (bench_common.hpp: time_interleaved) so that ratios between them survive a noisy machine:
//   eigen          Map + noalias product on the op's own input buffers into a preallocated C,
//                  threaded by Eigen's own OpenMP split: the figure the op must match (the CPU
//                  backend splits a product across 2 threads itself, cpu::gemm_split)
//   eigen 1 thread the same on one thread: how much the threads actually add
//   Cpu::gemm 1t   the backend's packed kernel on one thread (per-thread efficiency vs Eigen's)
//   matmul fwd     matmul(a, b), a and b leaves requiring grad: records the graph (training path)
//   fwd nograd     matmul(a, b) under NoGrad
//   fwd+bwd        zero_grad, matmul, backward with a fixed upstream gradient dC: three GEMMs
//                  (C = AB, dA = dC B^T, dB = A^T dC), counted as 3 * 2 n^3 flops
// Then the products of one dense training step (bench/train_step's model), Cpu::gemm vs Eigen.
// Then the bf16 GEMM (Cpu::gemm_bf16: bf16 A, B, fp32 sums and C) at n = 2048 beside the fp32
// Cpu::gemm on the same threads, timed round-robin with the fp32 fallback path: the ratio
// bf16 / fp32 is the figure to watch: the target is >= 1.8 on a CPU with AVX512-BF16.
// Before timing, every result is checked against a naive double-precision reference on sampled
// entries, and the op is run twice to check it is bitwise deterministic at this thread count;
// the printed hashes let two runs (same thread count) be compared.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_common.hpp"

namespace {

using namespace megacpp;
using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Naive reference: entry (i, j) of op(X) op(Y), op(X) = X or X^T, for row-major X, Y with row
// strides ldx, ldy, accumulated in double. Also returns the sum of |terms|: the scale that the
// fp32 rounding error of the fast kernels is measured against.
struct RefEntry {
  double value = 0, abs_sum = 0;
};
RefEntry naive_entry(const float* X, index_t ldx, bool trans_x, const float* Y, index_t ldy, bool trans_y,
                     index_t k, index_t i, index_t j) {
  RefEntry r;
  for (index_t l = 0; l < k; ++l) {
    const double x = trans_x ? X[l * ldx + i] : X[i * ldx + l];
    const double y = trans_y ? Y[j * ldy + l] : Y[l * ldy + j];
    r.value += x * y;
    r.abs_sum += std::fabs(x * y);
  }
  return r;
}

// Largest |got - ref| / sum|terms| over `samples` pseudo-random entries of an (n, n) result.
template <class RefFn>
double max_scaled_error(const float* got, index_t n, int samples, RefFn ref) {
  Rng rng(7);
  double worst = 0;
  for (int s = 0; s < samples; ++s) {
    const index_t i = static_cast<index_t>(rng.below(n)), j = static_cast<index_t>(rng.below(n));
    const RefEntry r = ref(i, j);
    worst = std::max(worst, std::fabs(got[i * n + j] - r.value) / std::max(r.abs_sum, 1e-30));
  }
  return worst;
}

// FNV-1a over the bits of a float buffer: equal hashes across runs mean bitwise equal results.
std::uint64_t bits_hash(const float* p, index_t count) {
  std::uint64_t h = 1469598103934665603ull;
  const auto* bytes = reinterpret_cast<const unsigned char*>(p);
  for (std::size_t b = 0; b < static_cast<std::size_t>(count) * sizeof(float); ++b) h = (h ^ bytes[b]) * 1099511628211ull;
  return h;
}

struct SizeResult {
  double eigen = 0, eigen_1t = 0, packed_1t = 0, fwd = 0, fwd_nograd = 0, fwdbwd = 0;  // GFLOP/s
};

SizeResult bench_size(index_t n, const bench::BenchArgs& args, bool& all_ok) {
  Rng rng(1234 + static_cast<std::uint64_t>(n));
  Var<float, Cpu> a = Var<float, Cpu>::parameter(randn<float, Cpu>(Shape{n, n}, rng));  // A: (n, n)
  Var<float, Cpu> b = Var<float, Cpu>::parameter(randn<float, Cpu>(Shape{n, n}, rng));  // B: (n, n)
  const Tensor<float, Cpu> upstream = randn<float, Cpu>(Shape{n, n}, rng);               // dC: (n, n)
  Tensor<float, Cpu> eigen_out(Shape{n, n});                                              // C: (n, n)

  const Eigen::Map<const Mat> A(a.value().data(), n, n), B(b.value().data(), n, n);
  Eigen::Map<Mat> C(eigen_out.data(), n, n);

  // ---- correctness against the naive reference, and bitwise determinism ----
  C.noalias() = A * B;
  Var<float, Cpu> c = matmul(a, b);
  const Tensor<float, Cpu> first = c.value().clone();
  backward(c, upstream);
  const Tensor<float, Cpu> first_da = a.grad().clone(), first_db = b.grad().clone();
  a.zero_grad();
  b.zero_grad();
  c = matmul(a, b);
  backward(c, upstream);
  const bool deterministic =
      std::memcmp(first.data(), c.value().data(), sizeof(float) * static_cast<std::size_t>(n * n)) == 0 &&
      std::memcmp(first_da.data(), a.grad().data(), sizeof(float) * static_cast<std::size_t>(n * n)) == 0 &&
      std::memcmp(first_db.data(), b.grad().data(), sizeof(float) * static_cast<std::size_t>(n * n)) == 0;

  const float* pa = a.value().data();
  const float* pb = b.value().data();
  const float* pg = upstream.data();
  constexpr int samples = 256;
  const double err_c = max_scaled_error(first.data(), n, samples, [&](index_t i, index_t j) {
    return naive_entry(pa, n, false, pb, n, false, n, i, j);  // C = A B
  });
  const double err_eigen = max_scaled_error(eigen_out.data(), n, samples, [&](index_t i, index_t j) {
    return naive_entry(pa, n, false, pb, n, false, n, i, j);
  });
  const double err_da = max_scaled_error(first_da.data(), n, samples, [&](index_t i, index_t j) {
    return naive_entry(pg, n, false, pb, n, true, n, i, j);  // dA = dC B^T
  });
  const double err_db = max_scaled_error(first_db.data(), n, samples, [&](index_t i, index_t j) {
    return naive_entry(pa, n, true, pg, n, false, n, i, j);  // dB = A^T dC
  });
  // fp32 accumulation over n terms: the error bound grows like n * eps; 1e-5 is far inside it.
  constexpr double tolerance = 1e-5;
  const bool ok = err_c < tolerance && err_eigen < tolerance && err_da < tolerance && err_db < tolerance;
  all_ok = all_ok && ok && deterministic;
  std::printf("\nn = %" PRId64 ": naive double reference on %d sampled entries, max |err| / sum|terms|:\n", n, samples);
  std::printf("  C (matmul) %.1e, C (eigen) %.1e, dA %.1e, dB %.1e -> %s\n", err_c, err_eigen, err_da, err_db,
              ok ? "ok" : "FAILED");
  std::printf("  bitwise deterministic over 2 calls (C, dA, dB): %s; hashes C %016" PRIx64 " dA %016" PRIx64
              " dB %016" PRIx64 "\n",
              deterministic ? "yes" : "NO", bits_hash(first.data(), n * n), bits_hash(first_da.data(), n * n),
              bits_hash(first_db.data(), n * n));
  a.zero_grad();
  b.zero_grad();
  c = Var<float, Cpu>();

  // ---- timing ----
  std::vector<bench::TimedCase> cases;
  cases.push_back({"eigen (direct)", [&] { C.noalias() = A * B; }});
  cases.push_back({"eigen, 1 thread", [&] {
                     Eigen::setNbThreads(1);
                     C.noalias() = A * B;
                     Eigen::setNbThreads(args.threads);
                   }});
  const GemmArgs square = GemmArgs::dense(false, false, n, n, n);
  cases.push_back({"Cpu::gemm, 1 thread", [&] {
                     omp_set_num_threads(1);
                     Cpu::gemm<float>(square, 1.0f, pa, pb, 0.0f, eigen_out.data());
                     omp_set_num_threads(args.threads);
                   }});
  cases.push_back({"matmul fwd (grad on)", [&] { Var<float, Cpu> out = matmul(a, b); }});
  cases.push_back({"matmul fwd (NoGrad)", [&] {
                     NoGrad no_grad;
                     Var<float, Cpu> out = matmul(a, b);
                   }});
  cases.push_back({"matmul fwd+bwd", [&] {
                     a.zero_grad();
                     b.zero_grad();
                     Var<float, Cpu> out = matmul(a, b);
                     backward(out, upstream);
                   }});
  const double budget_s = args.quick ? 0.2 : 1.5;
  const int min_reps = args.quick ? 2 : 5;
  const std::vector<bench::Timing> t = bench::time_interleaved(cases, budget_s, min_reps);

  const double gemm_flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  const double flops[] = {gemm_flops, gemm_flops, gemm_flops, gemm_flops, gemm_flops, 3 * gemm_flops};
  std::printf("  %-22s %10s %10s %9s %9s %5s\n", "case", "median ms", "min ms", "GFLOP/s", "vs eigen", "reps");
  std::vector<double> gflops;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    gflops.push_back(flops[i] / t[i].median_s * 1e-9);
    std::printf("  %-22s %10.2f %10.2f %9.1f %9.3f %5d\n", cases[i].name.c_str(), t[i].median_s * 1e3,
                t[i].min_s * 1e3, gflops[i], gflops[i] / gflops[0], t[i].reps);
  }
  std::printf("  fwd+bwd time / fwd time: %.2f (3 GEMMs: ideal 3.00)\n", t[5].median_s / t[3].median_s);
  return {gflops[0], gflops[1], gflops[2], gflops[3], gflops[4], gflops[5]};
}

// The products of one training step of bench/train_step's dense model (4096 tokens, d 512,
// MLP 2048, kv 128, vocab chunks of 1024 x 8192): forward x W^T, dX = dY W, dW = dY^T X.
// Cpu::gemm against Eigen's product (threaded by Eigen) on the same buffers, timed round-robin.
struct ModelShapes {
  double packed = 0, eigen = 0;  // GFLOP/s over all the shapes (total flops / total time)
};
ModelShapes bench_model_shapes(const bench::BenchArgs& args) {
  struct Product { const char* what; index_t m, n, k; bool ta, tb; };
  const std::vector<Product> products{
      {"q/o proj fwd  x W^T", 4096, 512, 512, false, true},   {"k/v proj fwd  x W^T", 4096, 128, 512, false, true},
      {"mlp up fwd    x W^T", 4096, 2048, 512, false, true},  {"mlp down fwd  x W^T", 4096, 512, 2048, false, true},
      {"mlp up dX     dY W", 4096, 512, 2048, false, false},   {"mlp up dW     dY^T X", 2048, 512, 4096, true, false},
      {"q proj dW     dY^T X", 512, 512, 4096, true, false},  {"head logits   h E^T", 1024, 8192, 512, false, true},
      {"head dh       dz E", 1024, 512, 8192, false, false},   {"head dE       dz^T h", 8192, 512, 1024, true, false},
  };
  std::printf("\nthe dense train-step model's products (bench/train_step), Cpu::gemm vs Eigen:\n");
  std::printf("  %-22s %6s %6s %6s %9s %9s %7s\n", "product", "m", "n", "k", "GFLOP/s", "eigen", "ratio");
  ModelShapes total;
  double flops = 0, t_packed = 0, t_eigen = 0;
  Rng rng(99);
  for (const Product& p : products) {
    const GemmArgs g = GemmArgs::dense(p.ta, p.tb, p.m, p.n, p.k);
    const auto A = randn<float, Cpu>(Shape{p.m * p.k}, rng), B = randn<float, Cpu>(Shape{p.k * p.n}, rng);
    Tensor<float, Cpu> C(Shape{p.m * p.n});
    const auto t = bench::time_interleaved(
        {{"packed", [&] { Cpu::gemm<float>(g, 1.0f, A.data(), B.data(), 0.0f, C.data()); }},
         {"eigen", [&] { cpu::eigen_gemm<float>(g, 1.0f, A.data(), B.data(), 0.0f, C.data()); }}},
        args.quick ? 0.1 : 0.6, args.quick ? 2 : 5);
    const double f = 2.0 * static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k);
    flops += f;
    t_packed += t[0].median_s;
    t_eigen += t[1].median_s;
    std::printf("  %-22s %6" PRId64 " %6" PRId64 " %6" PRId64 " %9.1f %9.1f %7.2f\n", p.what, p.m, p.n, p.k,
                f / t[0].median_s * 1e-9, f / t[1].median_s * 1e-9, t[1].median_s / t[0].median_s);
  }
  total.packed = flops / t_packed * 1e-9;
  total.eigen = flops / t_eigen * 1e-9;
  std::printf("  %-22s %20s %9.1f %9.1f %7.2f\n", "all", "", total.packed, total.eigen, total.packed / total.eigen);
  return total;
}

// fp32 and bf16 GEMM GFLOP/s of one run at n (all threads, Cpu::gemm's own split).
struct Bf16Result {
  double fp32 = 0, bf16 = 0, fallback = 0;
};

Bf16Result bench_bf16(index_t n, const bench::BenchArgs& args, bool& all_ok) {
  Rng rng(4321 + static_cast<std::uint64_t>(n));
  const Tensor<float, Cpu> a = randn<float, Cpu>(Shape{n, n}, rng), b = randn<float, Cpu>(Shape{n, n}, rng);
  const Tensor<bf16, Cpu> a16 = a.to<bf16>(), b16 = b.to<bf16>();
  // the reference operands: the bf16 values, exactly, as fp32
  const Tensor<float, Cpu> a_rounded = a16.to<float>(), b_rounded = b16.to<float>();
  Tensor<float, Cpu> c(Shape{n, n}), c_bf16(Shape{n, n}), c_fallback(Shape{n, n});
  const GemmArgs g = GemmArgs::dense(false, false, n, n, n);
  const cpu::Bf16GemmPath path = cpu::bf16_gemm_path();

  // ---- correctness against the naive reference on the bf16 values, and determinism ----
  Cpu::gemm_bf16(g, 1.0f, a16.data(), b16.data(), 0.0f, c_bf16.data());
  const Tensor<float, Cpu> first = c_bf16.clone();
  Cpu::gemm_bf16(g, 1.0f, a16.data(), b16.data(), 0.0f, c_bf16.data());
  const bool deterministic = std::memcmp(first.data(), c_bf16.data(), sizeof(float) * static_cast<std::size_t>(n * n)) == 0;
  cpu::gemm_bf16(g, 1.0f, a16.data(), b16.data(), 0.0f, c_fallback.data(), cpu::Bf16GemmPath::fp32_fallback);
  constexpr int samples = 256;
  const auto ref = [&](index_t i, index_t j) { return naive_entry(a_rounded.data(), n, false, b_rounded.data(), n, false, n, i, j); };
  const double err = max_scaled_error(c_bf16.data(), n, samples, ref);
  const double err_fallback = max_scaled_error(c_fallback.data(), n, samples, ref);
  // The products of bf16 values are exact in fp32: only the fp32 summation rounds (same bound as
  // the fp32 products above).
  constexpr double tolerance = 1e-5;
  const bool ok = err < tolerance && err_fallback < tolerance;
  all_ok = all_ok && ok && deterministic;
  std::printf("\nbf16 GEMM, n = %" PRId64 ", path %s: naive reference on the bf16 values, %d sampled entries, max |err| / "
              "sum|terms|: %.1e (fallback %.1e) -> %s; bitwise deterministic over 2 calls: %s, hash %016" PRIx64 "\n",
              n, std::string(cpu::bf16_gemm_path_name(path)).c_str(), samples, err, err_fallback, ok ? "ok" : "FAILED",
              deterministic ? "yes" : "NO", bits_hash(first.data(), n * n));

  // ---- timing, round-robin ----
  const std::vector<bench::TimedCase> cases{
      {"Cpu::gemm fp32", [&] { Cpu::gemm<float>(g, 1.0f, a.data(), b.data(), 0.0f, c.data()); }},
      {"Cpu::gemm_bf16", [&] { Cpu::gemm_bf16(g, 1.0f, a16.data(), b16.data(), 0.0f, c_bf16.data()); }},
      {"gemm_bf16 fp32_fallback", [&] {
         cpu::gemm_bf16(g, 1.0f, a16.data(), b16.data(), 0.0f, c_fallback.data(), cpu::Bf16GemmPath::fp32_fallback);
       }},
  };
  const std::vector<bench::Timing> t = bench::time_interleaved(cases, args.quick ? 0.2 : 1.5, args.quick ? 2 : 5);
  const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  std::printf("  %-24s %10s %10s %9s %9s %5s\n", "case", "median ms", "min ms", "GFLOP/s", "vs fp32", "reps");
  for (std::size_t i = 0; i < cases.size(); ++i)
    std::printf("  %-24s %10.2f %10.2f %9.1f %9.3f %5d\n", cases[i].name.c_str(), t[i].median_s * 1e3, t[i].min_s * 1e3,
                flops / t[i].median_s * 1e-9, t[0].median_s / t[i].median_s, t[i].reps);
  return {flops / t[0].median_s * 1e-9, flops / t[1].median_s * 1e-9, flops / t[2].median_s * 1e-9};
}

}  // namespace

int main(int argc, char** argv) {
  const bench::BenchArgs args = bench::parse_args(argc, argv);
  bench::print_system_info("gemm", "fp32 C (n, n) = A (n, n) B (n, n), n in {1024, 2048}; Var<float, Cpu> matmul vs Eigen", args);
  const double peak_start = bench::fma_peak_gflops();
  std::printf("fp32 FMA peak: %.1f GFLOP/s measured over all threads (the ceiling for any fp32 GEMM)\n", peak_start);
  const cpu::Bf16GemmPath bf16_path = cpu::bf16_gemm_path();
  const char* bf16_setting = std::getenv("MEGACPP_BF16_GEMM");
  std::printf("bf16 GEMM path: %s (CPU AVX512-BF16: %s; MEGACPP_BF16_GEMM=%s; AMX: no path)\n",
              std::string(cpu::bf16_gemm_path_name(bf16_path)).c_str(), cpu::cpu_has_avx512_bf16() ? "yes" : "no",
              bf16_setting ? bf16_setting : "(unset)");
  const double bf16_peak = bench::bf16_dot_peak_gflops();
  std::printf("bf16 VDPBF16PS peak: %.1f GFLOP/s measured over all threads (%.2fx the fp32 FMA peak; 0: no AVX512-BF16)\n",
              bf16_peak, bf16_peak / peak_start);

  bool all_ok = true;
  const SizeResult r1024 = bench_size(1024, args, all_ok);
  const SizeResult r2048 = bench_size(2048, args, all_ok);
  const ModelShapes model = bench_model_shapes(args);
  const Bf16Result bf16 = bench_bf16(2048, args, all_ok);

  const double peak_end = bench::fma_peak_gflops();
  std::printf("\nfp32 FMA peak at the end: %.1f GFLOP/s (a change from the start means the machine changed state)\n",
              peak_end);
  std::printf("matmul fwd / eigen at 2048: %.3f; at 2048 matmul reaches %.0f%%, eigen %.0f%% of the FMA peak; "
              "one thread: Cpu::gemm / eigen %.3f\n",
              r2048.fwd / r2048.eigen, 100.0 * r2048.fwd / std::max(peak_start, peak_end),
              100.0 * r2048.eigen / std::max(peak_start, peak_end), r2048.packed_1t / r2048.eigen_1t);
  if (!all_ok) std::printf("CHECK FAILED: see the reference/determinism lines above\n");

  bench::JsonLine json("gemm");
  json.add("threads", args.threads)
      .add("matmul_fwd_gflops_1024", r1024.fwd)
      .add("matmul_fwd_nograd_gflops_1024", r1024.fwd_nograd)
      .add("matmul_fwdbwd_gflops_1024", r1024.fwdbwd)
      .add("eigen_gflops_1024", r1024.eigen)
      .add("matmul_fwd_gflops_2048", r2048.fwd)
      .add("matmul_fwd_nograd_gflops_2048", r2048.fwd_nograd)
      .add("matmul_fwdbwd_gflops_2048", r2048.fwdbwd)
      .add("eigen_gflops_2048", r2048.eigen)
      .add("eigen_1thread_gflops_2048", r2048.eigen_1t)
      .add("gemm_1thread_gflops_2048", r2048.packed_1t)
      .add("model_products_gflops", model.packed)
      .add("model_products_eigen_gflops", model.eigen)
      .add("ratio_fwd_vs_eigen_2048", r2048.fwd / r2048.eigen, 3)
      .add("fma_peak_gflops", std::min(peak_start, peak_end))
      .add("bf16_path", cpu::bf16_gemm_path_name(bf16_path))
      .add("bf16_gflops_2048", bf16.bf16)
      .add("fp32_gflops_2048", bf16.fp32)
      .add("bf16_over_fp32", bf16.bf16 / bf16.fp32, 3)
      .add("bf16_fallback_gflops_2048", bf16.fallback)
      .add("bf16_peak_gflops", bf16_peak)
      .add("checks_ok", all_ok ? 1 : 0);
  json.print();
  return all_ok ? 0 : 1;
}
