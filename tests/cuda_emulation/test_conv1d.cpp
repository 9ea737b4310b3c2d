// tests/cuda_emulation/test_conv1d.cpp: Mamba-2's document-aware causal conv1d on CUDA
// (CausalConv1d<Cuda>, detail/ssm/conv1d.cuh) on the emulator against the CPU kernel
// (cpu/detail/ssm/conv1d.hpp): y and every gradient (added into non-zero initial values) within
// rounding of the CPU's, in float and double. dw and dbias are sums over every token, cut into
// runs: rows long enough for several runs, with documents shorter than the filter, and 40,000
// tokens (runs longer than the shortest), and padding runs around short documents. Also the same
// bits run to run and under the reversed and greedy schedules.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <limits>
#include <type_traits>
#include <vector>

#include "conv1d_emulated.hpp"
#include "host_arrays.hpp"
#include "schedules.hpp"

#include "megacpp/backends/cpu/kernels.hpp"

namespace megacpp::cuda_emulation {
namespace {

struct Conv1dCase {
  const char* name;
  index_t channels, width;
  bool with_bias;
  std::vector<std::vector<index_t>> documents;  // per row, its documents' lengths (each row the same total);
                                                // a negative length -n: n padding tokens (doc id -1)
  double float_tolerance = 1e-5;                // against the CPU in float, relative to each output's largest value
};

const std::vector<Conv1dCase>& conv1d_cases() {
  static const std::vector<Conv1dCase> all{
      {"width 4 with bias, 5 channels: rows of 150 tokens (5 runs), 1- and 3-token documents", 5, 4, true,
       {{3, 70, 1, 76}, {150}}},
      {"width 2 without bias, 3 channels, one run", 3, 2, false, {{10, 6}, {16}}},
      // padding (from_spans) on both sides of documents shorter than the filter: a padding token
      // reads its own run only, never the padding beyond a document, although both have id -1
      {"width 4 with bias, 3 channels: padding runs around 1- and 2-token documents", 3, 4, true,
       {{-2, 1, -3, 6, -4}, {-1, 2, -1, 12}}},
      // dbias and dw sum 40,000 terms in float: the CPU's one serial sum and the runs' sums round
      // differently by about the square root of the count times float's epsilon (measured 4.4e-6).
      {"width 4 with bias, 2 channels: rows of 20,000 tokens (the sum over 40,000 in 500 runs of 80)", 2, 4, true,
       {{7000, 13000}, {20000}}, 5e-5},
  };
  return all;
}

template <class T>
struct Problem {
  kernels::Conv1dParams p;
  std::vector<std::int32_t> doc_ids;
  std::vector<T> x, w, bias, dy;
  explicit Problem(const Conv1dCase& c) {
    index_t seq = 0;
    doc_ids = doc_ids_of(c.documents, 2, seq);
    p = {static_cast<index_t>(c.documents.size()), seq, c.channels, c.width};
    const auto n = [](index_t count) { return static_cast<std::size_t>(count); };
    Rng rng(17);
    x = uniform<T>(n(p.batch * seq * c.channels), rng);
    w = uniform<T>(n(c.channels * c.width), rng);
    if (c.with_bias) bias = uniform<T>(n(c.channels), rng);
    dy = uniform<T>(x.size(), rng);
  }
};

template <class T>
struct Run {
  std::vector<T> y, dx, dw, dbias;
  std::vector<std::vector<T>> outputs() const { return {y, dx, dw, dbias}; }
};

enum class Kernels { cpu, emulated };

template <class T>
Run<T> run(const Problem<T>& pr, Kernels kernels) {
  const kernels::Conv1dParams& p = pr.p;
  Run<T> r;
  r.y.assign(pr.x.size(), std::numeric_limits<T>::quiet_NaN());
  r.dx.assign(pr.x.size(), T(0.25));
  r.dw.assign(pr.w.size(), T(0.25));
  r.dbias.assign(pr.bias.size(), T(0.25));
  const T* bias = pr.bias.empty() ? nullptr : pr.bias.data();
  T* dbias = r.dbias.empty() ? nullptr : r.dbias.data();
  if (kernels == Kernels::cpu) {
    namespace conv = megacpp::cpu::conv;
    conv::causal_conv1d_forward<T>(p.batch, p.seq, p.channels, p.width, pr.doc_ids.data(), pr.x.data(), pr.w.data(),
                                   bias, r.y.data());
    conv::causal_conv1d_backward<T>(p.batch, p.seq, p.channels, p.width, pr.doc_ids.data(), pr.x.data(), pr.w.data(),
                                    pr.dy.data(), r.dx.data(), r.dw.data(), dbias);
  } else {
    const kernels::Conv1dArgs<T> a{pr.x.data(), pr.w.data(), bias, r.y.data()};
    emulated_conv1d_forward<T>(p, pr.doc_ids.data(), a);
    const kernels::Conv1dGrads<T> g{pr.dy.data(), r.dx.data(), r.dw.data(), dbias};
    emulated_conv1d_backward<T>(p, pr.doc_ids.data(), a, g);
  }
  return r;
}

template <class T>
void check_against_cpu() {
  for (const Conv1dCase& c : conv1d_cases()) {
    INFO(c.name);
    const Problem<T> pr(c);
    const Run<T> got = run(pr, Kernels::emulated), want = run(pr, Kernels::cpu);
    const double tolerance = std::is_same_v<T, float> ? c.float_tolerance : 1e-13;
    const auto check = [&](const char* what, const std::vector<T>& g, const std::vector<T>& w) {
      const double error = scaled_error(g, w);
      std::printf("  conv1d %s %-6s error %.2e  (%s)\n", std::is_same_v<T, float> ? "float " : "double", what, error,
                  c.name);
      INFO(what << ": error " << error << " against " << tolerance);
      CHECK(error <= tolerance);
    };
    check("y", got.y, want.y);
    check("dx", got.dx, want.dx);
    check("dw", got.dw, want.dw);
    check("dbias", got.dbias, want.dbias);
  }
}

}  // namespace

TEST_CASE("conv1d: CUDA forward and backward on the emulator match the CPU kernel, float", "[conv1d]") {
  check_against_cpu<float>();
}

TEST_CASE("conv1d: CUDA forward and backward on the emulator match the CPU kernel, double", "[conv1d]") {
  check_against_cpu<double>();
}

// The rule itself, on the CPU kernel: token 3 of row 0 (padding after a 1-token document, itself
// after two padding tokens) reads only itself: y = bias + w[:, K - 1] x. Its taps 0 and 1 would
// read tokens 0 and 1, padding with the same id -1, were the ids at the ends compared.
TEST_CASE("conv1d: a padding token reads no padding beyond a document", "[conv1d]") {
  const Conv1dCase& c = conv1d_cases()[2];
  REQUIRE(c.documents.front().front() == -2);
  const Problem<double> pr(c);
  const Run<double> cpu = run(pr, Kernels::cpu), emulated = run(pr, Kernels::emulated);
  const index_t C = c.channels, K = c.width, t = 3;
  for (index_t ch = 0; ch < C; ++ch) {
    const auto at = static_cast<std::size_t>(t * C + ch);
    const double alone = pr.bias[ch] + pr.w[ch * K + K - 1] * pr.x[at];
    CHECK(cpu.y[at] == Approx(alone).epsilon(1e-14).margin(1e-14));
    CHECK(emulated.y[at] == Approx(alone).epsilon(1e-14).margin(1e-14));
  }
}

TEST_CASE("conv1d: the same bits run to run and under reversed and greedy schedules", "[conv1d]") {
  for (const Conv1dCase& c : conv1d_cases()) {
    INFO(c.name);
    const Problem<float> pr(c);
    check_same_bits_under_schedules([&] { return run(pr, Kernels::emulated).outputs(); });
  }
}

}  // namespace megacpp::cuda_emulation
