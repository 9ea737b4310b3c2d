// tests/cuda_emulation/test_rows.cpp: the CUDA backend's row kernels (detail/rows.cuh: softmax,
// log-softmax, RMSNorm, forward and backward) on the emulator against the CPU backend's
// (cpu/detail/rows.hpp), in float and double: a block per row, and RMSNorm's warp per row with and
// without 16-byte packets; gradients added into non-zero values; a fully masked softmax row. The
// RMSNorm gain gradient is a sum over every row: one pass for few rows, chunks of rows summed in two
// passes for many (4,096 rows at width 512, uneven chunks, a single column). Also the same bits run
// to run and under the reversed and greedy schedules.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdio>
#include <limits>
#include <type_traits>
#include <vector>

#include "host_arrays.hpp"
#include "rows_emulated.hpp"
#include "schedules.hpp"

#include "megacpp/backends/cpu.hpp"

namespace megacpp::cuda_emulation {
namespace {

enum class Kernels { cpu, emulated };

template <class T>
double tolerance_for(double float_tolerance) {
  return std::is_same_v<T, float> ? float_tolerance : 1e-13;
}

template <class T>
void check_close(const char* what, const char* name, const std::vector<T>& got, const std::vector<T>& want,
                 double tolerance) {
  const double error = scaled_error(got, want);
  std::printf("  rows %s %-12s error %.2e  (%s)\n", std::is_same_v<T, float> ? "float " : "double", what, error, name);
  INFO(name << ", " << what << ": error " << error << " against " << tolerance);
  CHECK(error <= tolerance);
}

// ---- softmax and log-softmax ------------------------------------------------------------------

struct SoftmaxCase {
  const char* name;
  index_t rows, cols;
  bool masked_row;  // row 1 all -inf (softmax only: zeros out, zero gradient)
};

const std::vector<SoftmaxCase>& softmax_cases() {
  static const std::vector<SoftmaxCase> all{
      {"(3, 7): fewer columns than a block's threads", 3, 7, false},
      {"(4, 1000), row 1 fully masked", 4, 1000, true},
      {"(2, 3000): a row of several strides", 2, 3000, false},
  };
  return all;
}

template <class T>
struct SoftmaxRun {
  std::vector<T> y, gx, log_y, log_gx;
  std::vector<std::vector<T>> outputs() const { return {y, gx, log_y, log_gx}; }
};

template <class T>
SoftmaxRun<T> run_softmax(const SoftmaxCase& c, Kernels kernels) {
  Rng rng(41);
  const auto n = static_cast<std::size_t>(c.rows * c.cols);
  std::vector<T> x = uniform<T>(n, rng, -4, 4), gy = uniform<T>(n, rng);
  if (c.masked_row)
    for (index_t col = 0; col < c.cols; ++col) x[static_cast<std::size_t>(c.cols + col)] = -std::numeric_limits<T>::infinity();
  SoftmaxRun<T> r{uninitialized_device<T>(c.rows * c.cols), std::vector<T>(n, T(0.25)),
                  uninitialized_device<T>(c.rows * c.cols), std::vector<T>(n, T(0.25))};
  std::vector<T> finite_x = x;  // log-softmax of a fully masked row is not finite: take it unmasked
  if (c.masked_row)
    for (index_t col = 0; col < c.cols; ++col) finite_x[static_cast<std::size_t>(c.cols + col)] = T(0);
  if (kernels == Kernels::cpu) {
    Cpu::softmax<T>(c.rows, c.cols, x.data(), r.y.data());
    Cpu::softmax_backward<T>(c.rows, c.cols, r.y.data(), gy.data(), r.gx.data());
    Cpu::log_softmax<T>(c.rows, c.cols, finite_x.data(), r.log_y.data());
    Cpu::log_softmax_backward<T>(c.rows, c.cols, r.log_y.data(), gy.data(), r.log_gx.data());
  } else {
    emulated_softmax<T>(c.rows, c.cols, x.data(), r.y.data());
    emulated_softmax_backward<T>(c.rows, c.cols, r.y.data(), gy.data(), r.gx.data());
    emulated_log_softmax<T>(c.rows, c.cols, finite_x.data(), r.log_y.data());
    emulated_log_softmax_backward<T>(c.rows, c.cols, r.log_y.data(), gy.data(), r.log_gx.data());
  }
  return r;
}

template <class T>
void check_softmax_against_cpu() {
  const double tolerance = tolerance_for<T>(1e-6);
  for (const SoftmaxCase& c : softmax_cases()) {
    const SoftmaxRun<T> got = run_softmax<T>(c, Kernels::emulated), want = run_softmax<T>(c, Kernels::cpu);
    check_close("softmax", c.name, got.y, want.y, tolerance);
    check_close("softmax dx", c.name, got.gx, want.gx, tolerance);
    check_close("log_softmax", c.name, got.log_y, want.log_y, tolerance);
    check_close("log dx", c.name, got.log_gx, want.log_gx, tolerance);
  }
}

// ---- RMSNorm -----------------------------------------------------------------------------------

struct RmsNormCase {
  const char* name;
  index_t rows, cols;
  bool with_gain;
  index_t gain_chunks;  // the cut of the gain gradient's rows (1: one pass)
  bool large = false;   // left out of the schedule test (the uneven and one-column cases take two passes there)
};

const std::vector<RmsNormCase>& rmsnorm_cases() {
  static const std::vector<RmsNormCase> all{
      {"(6, 512) with gain: a warp per row, packets", 6, 512, true, 1},
      {"(5, 131) with gain: a warp per row, single elements", 5, 131, true, 1},
      {"(7, 96) without gain", 7, 96, false, 1},
      {"(3, 9000) with gain: a block per row", 3, 9000, true, 1},
      // The gain gradient sums 4,096 terms: the CPU in float, one running sum per column; CUDA in
      // double, in 32 chunks. They differ by the CPU's float rounding (measured 1.7e-6).
      {"(4096, 512) with gain: the gain gradient in 32 chunks of 128 rows", 4096, 512, true, 32, true},
      {"(1000, 40) with gain: uneven chunks, 7 of 142 or 143 rows", 1000, 40, true, 7},
      {"(3000, 1) with gain: one column, 23 chunks", 3000, 1, true, 23},
  };
  return all;
}

template <class T>
struct RmsNormRun {
  std::vector<T> y, rstd, gx, ggain;
  std::vector<std::vector<T>> outputs() const { return {y, rstd, gx, ggain}; }
};

template <class T>
RmsNormRun<T> run_rmsnorm(const RmsNormCase& c, Kernels kernels) {
  Rng rng(43);
  const auto n = static_cast<std::size_t>(c.rows * c.cols);
  const std::vector<T> x = uniform<T>(n, rng), gy = uniform<T>(n, rng);
  const std::vector<T> gain = c.with_gain ? uniform<T>(static_cast<std::size_t>(c.cols), rng, 0.5, 1.5) : std::vector<T>{};
  const T* g = c.with_gain ? gain.data() : nullptr;
  const T eps = T(1e-6);
  RmsNormRun<T> r{uninitialized_device<T>(c.rows * c.cols), uninitialized_device<T>(c.rows), std::vector<T>(n, T(0.25)),
                  std::vector<T>(gain.size(), T(0.25))};
  T* ggain = c.with_gain ? r.ggain.data() : nullptr;
  if (kernels == Kernels::cpu) {
    Cpu::rmsnorm<T>(c.rows, c.cols, x.data(), g, eps, r.y.data(), r.rstd.data());
    Cpu::rmsnorm_backward<T>(c.rows, c.cols, x.data(), g, r.rstd.data(), gy.data(), r.gx.data(), ggain);
  } else {
    emulated_rmsnorm<T>(c.rows, c.cols, x.data(), g, eps, r.y.data(), r.rstd.data());
    emulated_rmsnorm_backward<T>(c.rows, c.cols, x.data(), g, r.rstd.data(), gy.data(), r.gx.data(), ggain);
  }
  return r;
}

template <class T>
void check_rmsnorm_against_cpu() {
  for (const RmsNormCase& c : rmsnorm_cases()) {
    INFO(c.name);
    CHECK(rmsnorm_gain_chunks(c.rows, c.cols) == c.gain_chunks);
    const double tolerance = tolerance_for<T>(1e-5);
    const RmsNormRun<T> got = run_rmsnorm<T>(c, Kernels::emulated), want = run_rmsnorm<T>(c, Kernels::cpu);
    check_close("rmsnorm y", c.name, got.y, want.y, tolerance);
    check_close("rstd", c.name, got.rstd, want.rstd, tolerance);
    check_close("rmsnorm dx", c.name, got.gx, want.gx, tolerance);
    check_close("dgain", c.name, got.ggain, want.ggain, tolerance);
  }
}

}  // namespace

TEST_CASE("rows: softmax and log-softmax on the emulator match the CPU kernels, float and double", "[rows]") {
  check_softmax_against_cpu<float>();
  check_softmax_against_cpu<double>();
}

TEST_CASE("rows: RMSNorm forward and backward on the emulator match the CPU kernels, float", "[rows]") {
  check_rmsnorm_against_cpu<float>();
}

TEST_CASE("rows: RMSNorm forward and backward on the emulator match the CPU kernels, double", "[rows]") {
  check_rmsnorm_against_cpu<double>();
}

TEST_CASE("rows: the same bits run to run and under reversed and greedy schedules", "[rows]") {
  const auto check_schedules = [](const char* name, const auto& run) {
    INFO(name);
    check_same_bits_under_schedules(run);
  };
  for (const SoftmaxCase& c : softmax_cases())
    check_schedules(c.name, [&] { return run_softmax<float>(c, Kernels::emulated).outputs(); });
  for (const RmsNormCase& c : rmsnorm_cases())
    if (!c.large) check_schedules(c.name, [&] { return run_rmsnorm<float>(c, Kernels::emulated).outputs(); });
}

}  // namespace megacpp::cuda_emulation
