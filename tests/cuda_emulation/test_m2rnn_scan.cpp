// tests/cuda_emulation/test_m2rnn_scan.cpp: M2RNN's training recurrence on CUDA (M2RNNScan<Cuda>,
// detail/m2rnn_scan.cuh) on the emulator against the CPU kernel (cpu/detail/m2rnn_scan.hpp): y,
// the checkpoints and every gradient (added into non-zero initial values) within a few ulps of the
// CPU's, in float and double, over documents that start inside checkpoint chunks, 1-token
// documents, clipping, more state elements than a block has threads, the layer's default head,
// scratch in global memory, padding runs, and gradients left null; the same bits run to run and
// under the reversed and greedy schedules; no gradient crosses a document start.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <limits>
#include <string>
#include <vector>

#include "host_arrays.hpp"
#include "m2rnn_emulated.hpp"
#include "schedules.hpp"

#include "megacpp/backends/cpu/kernels.hpp"

namespace megacpp::cuda_emulation {
namespace {

struct ScanCase {
  const char* name;
  index_t heads, k_dim, v_dim;
  double clip;
  index_t checkpoint_every;
  std::vector<std::vector<index_t>> documents;  // per row, its documents' lengths (each row the same total);
                                                // a negative length -n: n padding tokens (doc id -1)
  bool with_q_and_W_gradients = true;           // false: those two gradients are null (not needed)
};

const std::vector<ScanCase>& scan_cases() {
  static const std::vector<ScanCase> all{
      {"2 heads, K 3, V 4; documents of 5, 1 and 6 beside one of 12; checkpoints every 4", 2, 3, 4, 0.0, 4,
       {{5, 1, 6}, {12}}},
      {"the state gradient clipped to [-0.05, 0.05]; checkpoints every 3", 2, 3, 3, 0.05, 3, {{4, 6}, {2, 8}}},
      {"V 130, K 2: more state elements (260) than the block's 256 threads", 1, 2, 130, 0.0, 5, {{3, 4}, {7}}},
      {"the layer's head (K 64, V 16), chunks of 64 across documents of 40 and 30", 1, 64, 16, 0.0, 64, {{40, 30}}},
      {"K 48, V 72: forward and backward scratch in global memory (past 48 KiB)", 1, 48, 72, 0.0, 2, {{3, 2}}},
      {"dq and dW not needed (null)", 2, 3, 4, 0.0, 4, {{5, 1, 6}, {12}}, false},
      // padding runs (from_spans) around documents: each run is a document of its own, so the
      // runs on either side of the 2-token document (both id -1) carry no state into each other
      {"padding runs around documents; checkpoints every 3", 2, 3, 4, 0.0, 3, {{-2, 2, -3, 5}, {4, -1, 7}}},
  };
  return all;
}

// One problem: operands, the upstream gradient and initial gradients, all drawn from one seed.
template <class T>
struct Problem {
  kernels::M2RNNScanParams p;
  std::vector<std::int32_t> doc_ids;
  std::vector<T> q, k, v, f, W, dy;
  explicit Problem(const ScanCase& c) {
    const auto n = [](index_t count) { return static_cast<std::size_t>(count); };
    index_t seq = 0;
    doc_ids = doc_ids_of(c.documents, 3, seq);
    const index_t batch = static_cast<index_t>(c.documents.size());
    p = {batch, seq, c.heads, c.k_dim, c.v_dim, c.clip, c.checkpoint_every};
    Rng rng(57);
    const index_t tokens = batch * seq * c.heads;
    q = uniform<T>(n(tokens * c.k_dim), rng);
    k = uniform<T>(n(tokens * c.k_dim), rng);
    v = uniform<T>(n(tokens * c.v_dim), rng);
    f = uniform<T>(n(tokens), rng, 0.05, 0.95);
    W = uniform<T>(n(c.heads * c.v_dim * c.v_dim), rng, -1.0 / static_cast<double>(c.v_dim),
                   1.0 / static_cast<double>(c.v_dim));
    dy = uniform<T>(n(tokens * c.v_dim), rng);
  }
  kernels::M2RNNScanOperands<T> operands() const { return {q.data(), k.data(), v.data(), f.data(), W.data()}; }
};

// y, the checkpoints and the five gradients (each started at 0.25: the backward adds).
template <class T>
struct Run {
  std::vector<T> y, checkpoints, dq, dk, dv, df, dW;
  std::vector<std::vector<T>> outputs() const { return {y, checkpoints, dq, dk, dv, df, dW}; }
};

enum class Kernel { cpu, emulated };

template <class T>
Run<T> run(const ScanCase& c, Kernel kernel) {
  const Problem<T> pr(c);
  const kernels::M2RNNScanParams& p = pr.p;
  Run<T> r;
  const auto n = [](index_t count) { return static_cast<std::size_t>(count); };
  r.y.assign(n(p.batch * p.seq * p.heads * p.v_dim), std::numeric_limits<T>::quiet_NaN());
  r.checkpoints.assign(n(p.batch * p.heads * p.chunks() * p.k_dim * p.v_dim), std::numeric_limits<T>::quiet_NaN());
  r.dq.assign(c.with_q_and_W_gradients ? pr.q.size() : 0, T(0.25));
  r.dk.assign(pr.k.size(), T(0.25));
  r.dv.assign(pr.v.size(), T(0.25));
  r.df.assign(pr.f.size(), T(0.25));
  r.dW.assign(c.with_q_and_W_gradients ? pr.W.size() : 0, T(0.25));
  const auto at = [](std::vector<T>& g) { return g.empty() ? nullptr : g.data(); };
  const kernels::M2RNNScanGradients<T> grads{at(r.dq), at(r.dk), at(r.dv), at(r.df), at(r.dW)};
  if (kernel == Kernel::cpu) {
    cpu::m2rnn::scan_forward<T>(p, pr.doc_ids.data(), pr.operands(), r.y.data(), r.checkpoints.data());
    cpu::m2rnn::scan_backward<T>(p, pr.doc_ids.data(), pr.operands(), pr.dy.data(), r.checkpoints.data(), grads);
  } else {
    emulated_m2rnn_forward(p, pr.doc_ids.data(), pr.operands(), r.y.data(), r.checkpoints.data());
    emulated_m2rnn_backward(p, pr.doc_ids.data(), pr.operands(), pr.dy.data(), r.checkpoints.data(), grads);
  }
  return r;
}

// Each output within `tolerance` of the CPU's, relative to that output's largest magnitude (at
// least 1). Not bitwise: both take the contract's operations in its order, but GCC contracts
// a * b + c into fused multiply-adds differently in the CPU kernel's vectorized loops and in the
// device code's scalar ones (-march=native has FMA), so values differ by an ulp here and there
// (measured: up to 7e-7 in float on the K 64 case, 1.4e-15 in double).
template <class T>
constexpr double kTolerance = std::is_same_v<T, float> ? 1e-5 : 1e-13;

template <class T>
std::string compare(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) return "sizes differ";
  double scale = 1, worst = 0;
  for (T x : want) scale = std::max(scale, std::abs(static_cast<double>(x)));
  for (std::size_t e = 0; e < got.size(); ++e) {
    if (!std::isfinite(got[e])) return "element " + std::to_string(e) + " is not finite";
    worst = std::max(worst, std::abs(static_cast<double>(got[e]) - static_cast<double>(want[e])));
  }
  return worst <= kTolerance<T> * scale ? "" : "differs by " + std::to_string(worst) + " at scale " + std::to_string(scale);
}

template <class T>
void check_close(const Run<T>& got, const Run<T>& want) {
  CHECK(compare(got.y, want.y) == "");
  CHECK(compare(got.checkpoints, want.checkpoints) == "");
  CHECK(compare(got.dq, want.dq) == "");
  CHECK(compare(got.dk, want.dk) == "");
  CHECK(compare(got.dv, want.dv) == "");
  CHECK(compare(got.df, want.df) == "");
  CHECK(compare(got.dW, want.dW) == "");
}

template <class T>
void check_against_cpu() {
  for (const ScanCase& c : scan_cases()) {
    INFO(c.name);
    check_close(run<T>(c, Kernel::emulated), run<T>(c, Kernel::cpu));
  }
}

}  // namespace

TEST_CASE("M2RNN recurrence: CUDA forward and backward on the emulator match the CPU kernel, float", "[m2rnn]") {
  check_against_cpu<float>();
}

TEST_CASE("M2RNN recurrence: CUDA forward and backward on the emulator match the CPU kernel, double", "[m2rnn]") {
  check_against_cpu<double>();
}

TEST_CASE("M2RNN recurrence: the same bits run to run and under reversed and greedy schedules", "[m2rnn]") {
  for (const ScanCase& c : scan_cases()) {
    INFO(c.name);
    check_same_bits_under_schedules([&] { return run<float>(c, Kernel::emulated).outputs(); });
  }
}

TEST_CASE("M2RNN recurrence: a document's gradients do not reach the document before it", "[m2rnn]") {
  // Row 0's second document (tokens 5..) gets dy = 0 on the first: the first document's gradients
  // must then be exactly those of a run where only the first document has dy.
  const ScanCase& c = scan_cases().front();
  Problem<float> pr(c);
  const kernels::M2RNNScanParams& p = pr.p;
  const auto grads_with = [&](const std::vector<float>& dy) {
    std::vector<float> y(pr.dy.size()), ckpt(static_cast<std::size_t>(p.batch * p.heads * p.chunks() * p.k_dim * p.v_dim));
    std::vector<float> dk(pr.k.size(), 0.0f);
    emulated_m2rnn_forward(p, pr.doc_ids.data(), pr.operands(), y.data(), ckpt.data());
    emulated_m2rnn_backward(p, pr.doc_ids.data(), pr.operands(), dy.data(), ckpt.data(),
                            kernels::M2RNNScanGradients<float>{nullptr, dk.data(), nullptr, nullptr, nullptr});
    return dk;
  };
  std::vector<float> later = pr.dy;
  const std::size_t first_doc_end = static_cast<std::size_t>(5 * p.heads * p.v_dim);  // row 0, tokens 0..4
  for (std::size_t e = 0; e < first_doc_end; ++e) later[e] = 0.0f;
  const std::vector<float> dk = grads_with(later);
  for (std::size_t e = 0; e < static_cast<std::size_t>(5 * p.heads * p.k_dim); ++e) {
    INFO("dk element " << e << " of row 0's first document");
    CHECK(dk[e] == 0.0f);
  }
}

}  // namespace megacpp::cuda_emulation
