// bench/optim/optim.cpp: time of one Muon<NS5> step and the GFLOP/s of its Newton-Schulz
// iterations, beside the fp32 GEMM rate of the same backend measured in the same run.
//
// Cases, timed round-robin (bench_common.hpp: time_interleaved) so that a change of machine state
// hits them alike and the ratio NS / GEMM stays meaningful:
//   gemm 2048^3            Cpu::gemm, C (2048, 2048) = A B, preallocated: the reference rate
//   NS5 (1024, 4096)       newton_schulz<NS5> alone, preallocated workspace: 5 steps of
//                          A = X X^T (1024x1024x4096), P = c A A + b A + a I (1024^3),
//                          X' = P X (1024x4096x1024); 2 s^2 (2 L + s) flops per step
//   Muon step (1024, 4096) Muon::step on one parameter: momentum, Nesterov mix, NS, update
//   Muon step, model       Muon::step on the 24 matrices of a 4-layer d = 512 model, stored
//                          (out, in) as nn/linear.hpp does: per layer wq, wo (512, 512);
//                          wk, wv (128, 512) (GQA, n_kv = n_heads / 4); w1 (2048, 512);
//                          w2 (512, 2048)
//   the three GEMM shapes of one NS step on their own, and Muon's three elementwise passes
//   (momentum, Nesterov mix, update) on (1024, 4096), to show where the time goes.
// Before timing, the GEMM-path NS is checked against the naive double reference
// (newton_schulz_reference, STYLE.md habit 4) on small matrices of both orientations, and the
// reference is timed beside it.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "megacpp/optim.hpp"

namespace {

using namespace megacpp;
using MuonF = optim::Muon<float, Cpu>;

// C (m, n) = A (m, k) B (k, n) with optional transposes, through the Backend contract.
void gemm(bool ta, bool tb, index_t m, index_t n, index_t k, const float* a, const float* b, float* c) {
  Cpu::gemm<float>(GemmArgs::dense(ta, tb, m, n, k), 1.0f, a, b, 0.0f, c);
}

struct ReferenceCheck {
  double max_abs_error = 0;
  double fast_ms = 0, reference_ms = 0;
};

// GEMM-path NS (fp32) against the naive double reference on a (rows, cols) Gaussian matrix.
ReferenceCheck check_against_reference(index_t rows, index_t cols) {
  Rng rng(42 + static_cast<std::uint64_t>(rows));
  const Tensor<float, Cpu> g = randn<float, Cpu>({rows, cols}, rng);
  Tensor<float, Cpu> out({rows, cols});
  optim::NsWorkspace<float, Cpu> ws(rows, cols);
  using clock = std::chrono::steady_clock;
  double fast = 1e30;  // best of 3: the first call also touches the workspace pages
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = clock::now();
    optim::newton_schulz<optim::NS5>(g.data(), out.data(), ws, 5);
    fast = std::min(fast, std::chrono::duration<double>(clock::now() - t0).count());
  }
  const std::vector<float> gh = g.to_host();
  const auto t0 = clock::now();
  const std::vector<double> ref = optim::newton_schulz_reference<optim::NS5>(std::vector<double>(gh.begin(), gh.end()), rows, cols, 5);
  const double slow = std::chrono::duration<double>(clock::now() - t0).count();
  ReferenceCheck r{0, fast * 1e3, slow * 1e3};
  const std::vector<float> o = out.to_host();
  for (std::size_t i = 0; i < o.size(); ++i) r.max_abs_error = std::max(r.max_abs_error, std::fabs(o[i] - ref[i]));
  return r;
}

struct Matrix {
  std::string name;
  Param<float, Cpu> param;
};

// A Muon over `matrices` with gradients set once (each timed step reuses them).
std::vector<Matrix> make_matrices(const std::vector<std::pair<std::string, std::pair<index_t, index_t>>>& shapes, Rng& rng) {
  std::vector<Matrix> out;
  for (const auto& [name, shape] : shapes) {
    Matrix m{name, Param<float, Cpu>::normal({shape.first, shape.second}, Role::matrix, rng, 0.02)};
    m.param.var.grad_buffer().assign(randn<float, Cpu>({shape.first, shape.second}, rng));
    out.push_back(std::move(m));
  }
  return out;
}
std::vector<optim::ParamRef<float, Cpu>> refs_of(const std::vector<Matrix>& ms) {
  std::vector<optim::ParamRef<float, Cpu>> refs;
  for (const Matrix& m : ms) refs.push_back(optim::make_param_ref(m.name, m.param));
  return refs;
}

}  // namespace

int main(int argc, char** argv) {
  const bench::BenchArgs args = bench::parse_args(argc, argv);
  bench::print_system_info("optim",
                           "fp32 Muon<NS5, sqrt_aspect> (momentum 0.95, nesterov, 5 NS steps): one (1024, 4096) matrix, "
                           "and the 24 matrices of a 4-layer d=512 model; NS GFLOP/s vs Cpu::gemm 2048^3",
                           args);
  const double peak_start = bench::fma_peak_gflops();
  std::printf("fp32 FMA peak: %.1f GFLOP/s measured over all threads\n", peak_start);

  // ---- correctness: GEMM path vs the naive double reference ----
  bool all_ok = true;
  std::printf("\nNS5 (fp32, Backend GEMMs) vs naive reference (double loops, modded-nanogpt's zeropower_via_newtonschulz5):\n");
  for (const auto& [r, c] : std::vector<std::pair<index_t, index_t>>{{128, 512}, {512, 128}}) {
    const ReferenceCheck chk = check_against_reference(r, c);
    const bool ok = chk.max_abs_error < 1e-4;
    all_ok = all_ok && ok;
    std::printf("  (%lld, %lld): max |fast - reference| %.1e -> %s; fast %.2f ms, reference %.1f ms (x%.0f)\n",
                static_cast<long long>(r), static_cast<long long>(c), chk.max_abs_error, ok ? "ok" : "FAILED", chk.fast_ms,
                chk.reference_ms, chk.reference_ms / chk.fast_ms);
  }

  // ---- buffers ----
  Rng rng(2025);
  constexpr index_t kGemm = 2048;
  const Tensor<float, Cpu> ga = randn<float, Cpu>({kGemm, kGemm}, rng), gb = randn<float, Cpu>({kGemm, kGemm}, rng);
  Tensor<float, Cpu> gc({kGemm, kGemm});

  constexpr index_t kRows = 1024, kCols = 4096;
  const Tensor<float, Cpu> big_g = randn<float, Cpu>({kRows, kCols}, rng);
  Tensor<float, Cpu> big_out({kRows, kCols});
  optim::NsWorkspace<float, Cpu> big_ws(kRows, kCols);
  // one NS step's GEMM operands, for the breakdown
  const Tensor<float, Cpu> x = randn<float, Cpu>({kRows, kCols}, rng, 0.01);
  Tensor<float, Cpu> gram({kRows, kRows}), poly({kRows, kRows}), x_next({kRows, kCols});
  gemm(false, true, kRows, kRows, kCols, x.data(), x.data(), gram.data());

  std::vector<Matrix> big = make_matrices({{"w", {kRows, kCols}}}, rng);
  MuonF big_muon(refs_of(big));

  std::vector<std::pair<std::string, std::pair<index_t, index_t>>> model_shapes;
  constexpr index_t d = 512, layers = 4;
  for (index_t l = 0; l < layers; ++l) {
    const std::string p = "blocks." + std::to_string(l) + ".";
    model_shapes.push_back({p + "attn.wq", {d, d}});
    model_shapes.push_back({p + "attn.wk", {d / 4, d}});
    model_shapes.push_back({p + "attn.wv", {d / 4, d}});
    model_shapes.push_back({p + "attn.wo", {d, d}});
    model_shapes.push_back({p + "mlp.w1", {4 * d, d}});
    model_shapes.push_back({p + "mlp.w2", {d, 4 * d}});
  }
  std::vector<Matrix> model = make_matrices(model_shapes, rng);
  MuonF model_muon(refs_of(model));
  double model_ns_flops = 0;
  for (const auto& [name, s] : model_shapes) model_ns_flops += optim::newton_schulz_flops(s.first, s.second, 5);

  // ---- timing ----
  std::vector<bench::TimedCase> cases;
  cases.push_back({"gemm 2048^3 (Cpu::gemm)", [&] { gemm(false, false, kGemm, kGemm, kGemm, ga.data(), gb.data(), gc.data()); }});
  cases.push_back({"NS5 (1024, 4096), 5 steps", [&] { optim::newton_schulz<optim::NS5>(big_g.data(), big_out.data(), big_ws, 5); }});
  cases.push_back({"Muon step (1024, 4096)", [&] { big_muon.step(); }});
  cases.push_back({"Muon step, 4-layer d=512", [&] { model_muon.step(); }});
  cases.push_back({"  NS GEMM A = X X^T", [&] { gemm(false, true, kRows, kRows, kCols, x.data(), x.data(), gram.data()); }});
  cases.push_back({"  NS GEMM c A A", [&] { gemm(false, false, kRows, kRows, kRows, gram.data(), gram.data(), poly.data()); }});
  cases.push_back({"  NS GEMM X' = P X", [&] { gemm(false, false, kRows, kCols, kRows, gram.data(), x.data(), x_next.data()); }});
  // Muon's elementwise passes on (1024, 4096): buf = lerp(buf, g, 0.05); g' = lerp(g, buf, 0.95);
  // W = W (1 - lr wd) - lr O. Separate buffers; the values drift, the work does not.
  Tensor<float, Cpu> ew_buf = Tensor<float, Cpu>::zeros({kRows, kCols}), ew_mix({kRows, kCols}), ew_w = x.clone();
  cases.push_back({"  Muon elementwise passes", [&] {
                     const index_t n = kRows * kCols;
                     Cpu::map<float>(1, n, fn::Lerp{0.05}, ew_buf.data(), In<float>{ew_buf.data()}, In<float>{big_g.data()});
                     Cpu::map<float>(1, n, fn::Lerp{0.95}, ew_mix.data(), In<float>{big_g.data()}, In<float>{ew_buf.data()});
                     Cpu::map<float>(1, n, fn::MuonUpdate{1.0, 0.02}, ew_w.data(), In<float>{ew_w.data()}, In<float>{big_out.data()});
                   }});
  const double budget_s = args.quick ? 0.2 : 1.5;
  const int min_reps = args.quick ? 2 : 5;
  const std::vector<bench::Timing> t = bench::time_interleaved(cases, budget_s, min_reps);

  const double gemm_flops = 2.0 * static_cast<double>(kGemm) * kGemm * kGemm;
  const double big_ns_flops = optim::newton_schulz_flops(kRows, kCols, 5);
  const double s = static_cast<double>(kRows), l = static_cast<double>(kCols);
  // 0: not a flop-bound case (no GFLOP/s printed)
  const double flops[] = {gemm_flops, big_ns_flops, big_ns_flops, model_ns_flops, 2 * s * s * l, 2 * s * s * s, 2 * s * s * l, 0.0};
  // GFLOP/s from the medians (the JSON figures) and from the minima (the least-disturbed run:
  // on a shared machine the two differ by the time other processes took).
  std::printf("\n  %-28s %10s %10s %9s %9s %11s %9s %5s\n", "case", "median ms", "min ms", "GFLOP/s", "vs gemm", "GFLOP/s@min",
              "vs gemm", "reps");
  std::vector<double> gflops, gflops_min;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    gflops.push_back(flops[i] / t[i].median_s * 1e-9);
    gflops_min.push_back(flops[i] / t[i].min_s * 1e-9);
    if (flops[i] == 0.0) {
      std::printf("  %-28s %10.2f %10.2f %9s %9s %11s %9s %5d\n", cases[i].name.c_str(), t[i].median_s * 1e3, t[i].min_s * 1e3,
                  "-", "-", "-", "-", t[i].reps);
      continue;
    }
    std::printf("  %-28s %10.2f %10.2f %9.1f %9.3f %11.1f %9.3f %5d\n", cases[i].name.c_str(), t[i].median_s * 1e3,
                t[i].min_s * 1e3, gflops[i], gflops[i] / gflops[0], gflops_min[i], gflops_min[i] / gflops_min[0], t[i].reps);
  }
  std::printf("  (Muon step GFLOP/s count only the NS flops: %.1f GFLOP for (1024, 4096), %.2f GFLOP for the model)\n",
              big_ns_flops * 1e-9, model_ns_flops * 1e-9);
  std::printf("  Muon's elementwise passes read/write %.0f MB per (1024, 4096) step (9 arrays): %.1f GB/s at the median\n",
              9.0 * 4.0 * kRows * kCols / 1e6, 9.0 * 4.0 * kRows * kCols / t[7].median_s * 1e-9);

  const double peak_end = bench::fma_peak_gflops();
  std::printf("\nfp32 FMA peak at the end: %.1f GFLOP/s (a change from the start means the machine changed state)\n", peak_end);
  const double ratio = gflops[1] / gflops[0];
  std::printf("NS GFLOP/s / gemm GFLOP/s: %.3f from medians, %.3f from minima (target >= 0.60) -> %s\n", ratio,
              gflops_min[1] / gflops_min[0], ratio >= 0.6 ? "met" : "NOT met");
  if (!all_ok) std::printf("CHECK FAILED: see the reference lines above\n");

  bench::JsonLine json("optim");
  json.add("muon_step_ms_1024x4096", t[2].median_s * 1e3)
      .add("muon_step_ms_model", t[3].median_s * 1e3)
      .add("ns_gflops", gflops[1], 1)
      .add("gemm_gflops", gflops[0], 1);
  json.print();
  return all_ok ? 0 : 1;
}
