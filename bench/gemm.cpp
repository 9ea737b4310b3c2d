// bench/gemm.cpp: GFLOP/s of megacpp's matmul op (the autograd path) beside Eigen called directly.
//
// For n in {1024, 2048}: C (n, n) = A (n, n) B (n, n) in fp32, five cases timed round-robin
// (bench_common.hpp: time_interleaved) so that ratios between them survive a noisy machine:
//   eigen          Map + noalias product on the op's own input buffers into a preallocated C,
//                  threaded by Eigen's own OpenMP split: the figure the op must match (the CPU
//                  backend splits a product across 2 threads itself, cpu::gemm_split)
//   eigen 1 thread the same on one thread: how much the threads actually add
//   matmul fwd     matmul(a, b), a and b leaves requiring grad: records the graph (training path)
//   fwd nograd     matmul(a, b) under NoGrad
//   fwd+bwd        zero_grad, matmul, backward with a fixed upstream gradient dC: three GEMMs
//                  (C = AB, dA = dC B^T, dB = A^T dC), counted as 3 * 2 n^3 flops
// Before timing, every result is checked against a naive double-precision reference on sampled
// entries, and the op is run twice to check it is bitwise deterministic at this thread count;
// the printed hashes let two runs (same thread count) be compared.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstring>
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
  double eigen = 0, eigen_1t = 0, fwd = 0, fwd_nograd = 0, fwdbwd = 0;  // GFLOP/s
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
  const double flops[] = {gemm_flops, gemm_flops, gemm_flops, gemm_flops, 3 * gemm_flops};
  std::printf("  %-22s %10s %10s %9s %9s %5s\n", "case", "median ms", "min ms", "GFLOP/s", "vs eigen", "reps");
  std::vector<double> gflops;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    gflops.push_back(flops[i] / t[i].median_s * 1e-9);
    std::printf("  %-22s %10.2f %10.2f %9.1f %9.3f %5d\n", cases[i].name.c_str(), t[i].median_s * 1e3,
                t[i].min_s * 1e3, gflops[i], gflops[i] / gflops[0], t[i].reps);
  }
  std::printf("  fwd+bwd time / fwd time: %.2f (3 GEMMs: ideal 3.00)\n", t[4].median_s / t[2].median_s);
  return {gflops[0], gflops[1], gflops[2], gflops[3], gflops[4]};
}

}  // namespace

int main(int argc, char** argv) {
  const bench::BenchArgs args = bench::parse_args(argc, argv);
  bench::print_system_info("gemm", "fp32 C (n, n) = A (n, n) B (n, n), n in {1024, 2048}; Var<float, Cpu> matmul vs Eigen", args);
  const double peak_start = bench::fma_peak_gflops();
  std::printf("fp32 FMA peak: %.1f GFLOP/s measured over all threads (the ceiling for any fp32 GEMM)\n", peak_start);

  bool all_ok = true;
  const SizeResult r1024 = bench_size(1024, args, all_ok);
  const SizeResult r2048 = bench_size(2048, args, all_ok);

  const double peak_end = bench::fma_peak_gflops();
  std::printf("\nfp32 FMA peak at the end: %.1f GFLOP/s (a change from the start means the machine changed state)\n",
              peak_end);
  std::printf("matmul fwd / eigen at 2048: %.3f; eigen at 2048 reaches %.0f%% of the FMA peak\n",
              r2048.fwd / r2048.eigen, 100.0 * r2048.eigen / std::max(peak_start, peak_end));
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
      .add("ratio_fwd_vs_eigen_2048", r2048.fwd / r2048.eigen, 3)
      .add("fma_peak_gflops", std::min(peak_start, peak_end))
      .add("checks_ok", all_ok ? 1 : 0);
  json.print();
  return all_ok ? 0 : 1;
}
