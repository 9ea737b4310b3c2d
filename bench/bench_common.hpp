// bench/bench_common.hpp: what every megacpp bench binary shares (STYLE.md rule 8).
//
// - BenchArgs: `--threads N` (OpenMP and Eigen thread count) and `--quick` (shorter timing).
// - print_system_info(): configuration, compiler, CPU, threads, Eigen version: a figure is only
//   comparable with another taken on the same setup, so every run says which one it is.
// - fma_peak_gflops(): the fp32 FMA throughput the threads actually get right now. On a VM the
//   vCPUs may share one physical core for a while, halving it; printing it at the start and end
//   of a run says which state the figures were taken in.
// - time_interleaved(): medians of several cases timed round-robin, so that a change of machine
//   state during the run hits every case alike and ratios between cases stay meaningful.
// - JsonLine (json_line.hpp): the one-line machine-readable summary each bench ends with.
#pragma once

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "json_line.hpp"
#include "megacpp/megacpp.hpp"  // before Eigen: it includes Eigen behind its GCC 12 warning guard

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace megacpp::bench {

struct BenchArgs {
  int threads = 0;     // 0: the OpenMP default (OMP_NUM_THREADS or all cores)
  bool quick = false;  // fewer, shorter repetitions: a smoke run, not figures to quote
};

// Parses the flags every bench accepts and applies the thread count to OpenMP and Eigen.
inline BenchArgs parse_args(int argc, char** argv, std::string_view usage_extra = {}) {
  BenchArgs args;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--quick") {
      args.quick = true;
    } else if (arg == "--threads" && i + 1 < argc) {
      args.threads = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--threads N] [--quick]%.*s\n", argv[0],
                   static_cast<int>(usage_extra.size()), usage_extra.data());
      std::exit(arg == "--help" || arg == "-h" ? 0 : 2);
    }
  }
  if (args.threads > 0) omp_set_num_threads(args.threads);
  args.threads = omp_get_max_threads();
  Eigen::setNbThreads(args.threads);
  return args;
}

// The "model name" line of /proc/cpuinfo, or "unknown" where there is none.
inline std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  }
  return "unknown";
}

inline void print_system_info(std::string_view bench, std::string_view configuration, const BenchArgs& args) {
  std::printf("bench:         %.*s\n", static_cast<int>(bench.size()), bench.data());
  std::printf("configuration: %.*s%s\n", static_cast<int>(configuration.size()), configuration.data(),
              args.quick ? " (--quick: short timing, not for quoting)" : "");
#if defined(__clang__)
  std::printf("compiler:      clang %s", __VERSION__);
#elif defined(__GNUC__)
  std::printf("compiler:      g++ %s", __VERSION__);
#else
  std::printf("compiler:      %s", __VERSION__);
#endif
#if defined(NDEBUG)
  std::printf(", NDEBUG");
#else
  std::printf(", assertions ON (not a release build)");
#endif
#if defined(__AVX512F__)
  std::printf(", AVX-512");
#elif defined(__AVX2__)
  std::printf(", AVX2");
#endif
  std::printf(", OpenMP %d\n", _OPENMP);
  std::printf("cpu:           %s (%d logical cpus online)\n", cpu_model().c_str(), omp_get_num_procs());
  std::printf("threads:       %d (OpenMP), %d (Eigen)\n", args.threads, Eigen::nbThreads());
  std::printf("eigen:         %d.%d.%d\n", EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION, EIGEN_MINOR_VERSION);
}

// fp32 multiply-add throughput of all threads together, from independent FMA chains held in
// registers (no memory traffic): the ceiling no fp32 kernel on this machine can pass.
// Returns 0 where the build has no AVX2/AVX-512.
inline double fma_peak_gflops(double seconds = 0.2) {
#if defined(__AVX512F__) || defined(__AVX2__)
#if defined(__AVX512F__)
  using vec = __m512;
  constexpr int lanes = 16;
  const auto fma = [](vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); };
  const auto splat = [](float x) { return _mm512_set1_ps(x); };
  const auto lane0 = [](vec a) { return _mm512_cvtss_f32(a); };
#else
  using vec = __m256;
  constexpr int lanes = 8;
  const auto fma = [](vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); };
  const auto splat = [](float x) { return _mm256_set1_ps(x); };
  const auto lane0 = [](vec a) { return _mm256_cvtss_f32(a); };
#endif
  constexpr int chains = 12;   // > latency x ports (4 x 2), so throughput-bound
  constexpr long inner = 1 << 16;
  const auto start = std::chrono::steady_clock::now();
  long rounds = 0;  // summed over threads
  float sink = 0;
#pragma omp parallel reduction(+ : sink, rounds)
  {
    vec acc[chains];
    for (int c = 0; c < chains; ++c) acc[c] = splat(0.001f * static_cast<float>(c));
    const vec m = splat(0.9999f), a = splat(1e-4f);
    do {
      for (long it = 0; it < inner; ++it) {
#pragma GCC unroll 12
        for (int c = 0; c < chains; ++c) acc[c] = fma(acc[c], m, a);
      }
      ++rounds;
    } while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds);
    for (int c = 0; c < chains; ++c) sink += lane0(acc[c]);
  }
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  volatile float keep = sink;  // the chains' results are used, so they are not optimised away
  (void)keep;
  const double flops = 2.0 * lanes * chains * static_cast<double>(inner) * static_cast<double>(rounds);
  return flops / elapsed * 1e-9;
#else
  (void)seconds;
  return 0.0;
#endif
}

// bf16 dot-product throughput of all threads together, measured like fma_peak_gflops: independent
// VDPBF16PS chains in registers (each instruction 16 lanes x 2 products = 64 flops). The ceiling
// of the bf16 GEMM's avx512_bf16 path. Returns 0 where the CPU or build has no AVX512-BF16.
#if MEGACPP_HAS_AVX512_BF16_KERNEL
MEGACPP_TARGET_AVX512BF16 inline double bf16_dot_peak_gflops_on_this_cpu(double seconds) {
  // VDPBF16PS has a longer latency than an FMA: 12 chains measured ~10% under the 24-chain figure
  // on the Zen 5 dev VM (more chains changed nothing).
  constexpr int chains = 24;
  constexpr long inner = 1 << 15;
  const auto start = std::chrono::steady_clock::now();
  long rounds = 0;
  float sink = 0;
#pragma omp parallel reduction(+ : sink, rounds)
  {
    __m512 acc[chains];
    for (int c = 0; c < chains; ++c) acc[c] = _mm512_set1_ps(0.001f * static_cast<float>(c));
    // bf16 pairs (1.0, 1.0) and (1e-4, 1e-4): the sums grow slowly and stay normal
    const __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80), y = (__m512bh)_mm512_set1_epi32(0x38d138d1);
    do {
      for (long it = 0; it < inner; ++it) {
#pragma GCC unroll 24
        for (int c = 0; c < chains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], x, y);
      }
      ++rounds;
    } while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds);
    for (int c = 0; c < chains; ++c) sink += _mm512_cvtss_f32(acc[c]);
  }
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  volatile float keep = sink;
  (void)keep;
  return 64.0 * chains * static_cast<double>(inner) * static_cast<double>(rounds) / elapsed * 1e-9;
}
#endif
inline double bf16_dot_peak_gflops(double seconds = 0.2) {
#if MEGACPP_HAS_AVX512_BF16_KERNEL
  if (cpu::cpu_has_avx512_bf16()) return bf16_dot_peak_gflops_on_this_cpu(seconds);
#endif
  (void)seconds;
  return 0.0;
}

// One timed case: `run` does the work once; `setup`, if given, runs untimed before each call.
struct TimedCase {
  std::string name;
  std::function<void()> run;
  std::function<void()> setup = {};
};

struct Timing {
  double median_s = 0, min_s = 0;
  int reps = 0;
};

// Runs every case once as warmup, then in rounds (case 0, case 1, ..., case 0, ...) until
// `budget_s` seconds per case have passed and each case ran at least `min_reps` times.
// Returns each case's median and minimum time.
inline std::vector<Timing> time_interleaved(const std::vector<TimedCase>& cases, double budget_s, int min_reps) {
  using clock = std::chrono::steady_clock;
  std::vector<std::vector<double>> samples(cases.size());
  for (const auto& c : cases) {
    if (c.setup) c.setup();
    c.run();
  }
  const auto start = clock::now();
  const double total_budget = budget_s * static_cast<double>(cases.size());
  for (int rep = 0; rep < min_reps || std::chrono::duration<double>(clock::now() - start).count() < total_budget; ++rep) {
    for (std::size_t i = 0; i < cases.size(); ++i) {
      if (cases[i].setup) cases[i].setup();
      const auto t0 = clock::now();
      cases[i].run();
      samples[i].push_back(std::chrono::duration<double>(clock::now() - t0).count());
    }
  }
  std::vector<Timing> out;
  for (auto& s : samples) {
    std::sort(s.begin(), s.end());
    out.push_back({s[s.size() / 2], s.front(), static_cast<int>(s.size())});
  }
  return out;
}

}  // namespace megacpp::bench
