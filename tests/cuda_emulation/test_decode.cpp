// tests/cuda_emulation/test_decode.cpp: the CUDA decode steps on the emulator against the CPU
// backend's. Mamba-3's recurrence (SsmStep<Cuda>, detail/ssm/step.cuh): every output and cache
// bitwise SsmStep<Cpu>'s (the same operations per element, the host's libm on both), SISO and
// MIMO, B and C in groups of heads (Mamba-2's step), every pair rotated or some, more columns than
// a block has threads, rows reset at their document starts. M2RNN's (M2RNNStep<Cuda>,
// detail/m2rnn_step.cuh): y and the state bitwise M2RNNStep<Cpu>'s, likewise, and the same bits
// under the reversed and greedy schedules of the block's threads. The attention (DecodeAttention<Cuda>,
// detail/attention_decode.cuh), against DecodeAttention<Cpu>, in float and double: rows of
// documents decoded token by token (GQA, softcap, a ring buffer of window slots, a window inside a
// larger cache), a full cache of more keys than a block has threads, head_dim wider than a block,
// more rows than a launch takes. The caches start as NaN (uninitialized memory): a key outside a
// row's visible ones that were read would show. Also: the same bits run to run and under another
// schedule, and one row's tokens never reaching another row's outputs (bitwise). The contracts'
// own cases (tests/support/kernel_cases/) need a backend; these drive the kernels on host vectors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "decode_emulated.hpp"
#include "host_arrays.hpp"
#include "schedules.hpp"

#include "megacpp/backends/cpu/kernels.hpp"
#include "megacpp/core/random.hpp"

namespace megacpp::cuda_emulation {
namespace {

using kernels::AttentionDecodeArgs;
using kernels::AttentionDecodeParams;
using kernels::DecodeRow;

// Both kernels sum in double and round once to T; they differ in the order of their sums (the CPU
// key by key, the GPU in warp trees and key subsets). Measured here (GCC 12): the float outputs
// bitwise the CPU's, the double ones within 3e-16 of each output's scale. A GPU's exp and tanh
// may differ from the host's by an ulp or two: the bounds allow two float ulps and 30x in double.
template <class T>
constexpr double kTolerance = std::is_same_v<T, float> ? 2.4e-7 : 1e-14;

struct Case {
  const char* name;
  index_t heads, kv_heads, head_dim, slots, window;
  double scale, softcap;
  std::vector<std::vector<index_t>> documents;  // per row, the lengths of its documents in order
};

// The state of one decode: caches, counters, and the step's inputs and output, in host memory.
template <class T>
struct Decode {
  AttentionDecodeParams p;
  std::vector<T> k, v;                      // (batch, slots, kv_heads, head_dim)
  std::vector<index_t> length, position;    // per row
  Decode(const Case& c, index_t batch) : k(static_cast<std::size_t>(batch * c.slots * c.kv_heads * c.head_dim),
                                          std::numeric_limits<T>::quiet_NaN()),
                                        v(k), length(static_cast<std::size_t>(batch), 0), position(length) {
    p.batch = batch;
    p.heads = c.heads;
    p.kv_heads = c.kv_heads;
    p.head_dim = c.head_dim;
    p.slots = c.slots;
    p.scale = c.scale > 0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.head_dim));
    p.softcap = c.softcap;
  }
};

// Whether row b's token t starts a document.
bool starts_document(const Case& c, index_t b, index_t t) {
  index_t start = 0;
  for (index_t length : c.documents[static_cast<std::size_t>(b)]) {
    if (t == start) return true;
    start += length;
  }
  return false;
}

index_t steps_of(const Case& c) {
  index_t n = 0;
  for (index_t length : c.documents[0]) n += length;
  return n;
}

enum class Kernel { cpu, emulated };

// Decodes every row of the case token by token on `kernel`; returns the outputs of every step,
// (steps, batch, heads, D). `perturbed_row` (if >= 0) gets other random tokens from a second
// stream; every other row's tokens are the same whatever it is.
template <class T>
std::vector<T> decode(const Case& c, Kernel kernel, index_t perturbed_row = -1, std::vector<T>* k_cache = nullptr) {
  const index_t batch = static_cast<index_t>(c.documents.size()), H = c.heads, Hkv = c.kv_heads, D = c.head_dim;
  Decode<T> d(c, batch);
  Rng rng(11), other(12);
  std::vector<T> out;
  for (index_t t = 0; t < steps_of(c); ++t) {
    std::vector<T> q, kn, vn;
    std::vector<DecodeRow> rows;
    for (index_t b = 0; b < batch; ++b) {
      const auto bi = static_cast<std::size_t>(b);
      std::vector<T> qb = uniform<T>(static_cast<std::size_t>(H * D), rng), kb = uniform<T>(static_cast<std::size_t>(Hkv * D), rng),
                     vb = uniform<T>(static_cast<std::size_t>(Hkv * D), rng);
      if (b == perturbed_row) {
        qb = uniform<T>(qb.size(), other);
        kb = uniform<T>(kb.size(), other);
        vb = uniform<T>(vb.size(), other);
      }
      q.insert(q.end(), qb.begin(), qb.end());
      kn.insert(kn.end(), kb.begin(), kb.end());
      vn.insert(vn.end(), vb.begin(), vb.end());
      if (starts_document(c, b, t)) d.length[bi] = d.position[bi] = 0;
      rows.push_back(kernels::decode_row(d.length[bi], d.position[bi], c.slots, c.window));
      d.length[bi] = std::min(d.length[bi] + 1, c.slots);
      d.position[bi] += 1;
    }
    kernels::check_decode_rows("decode", d.p, rows.data());
    std::vector<T> o(static_cast<std::size_t>(batch * H * D), std::numeric_limits<T>::quiet_NaN());
    const AttentionDecodeArgs<T> a{q.data(), kn.data(), vn.data(), d.k.data(), d.v.data(), o.data(), rows.data()};
    if (kernel == Kernel::cpu) kernels::DecodeAttention<Cpu>::step(d.p, a);
    else emulated_decode_step(d.p, a);
    out.insert(out.end(), o.begin(), o.end());
  }
  if (k_cache) *k_cache = d.k;
  return out;
}

// "" when every element of got is finite and within tol * (|want_i| + max |want|) of want.
template <class T>
std::string compare(const std::vector<T>& got, const std::vector<T>& want, double tol) {
  double scale = 0;
  for (T w : want) scale = std::max(scale, std::abs(static_cast<double>(w)));
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    if (!std::isfinite(g) || std::abs(g - w) > tol * (std::abs(w) + scale))
      return "element " + std::to_string(i) + ": got " + std::to_string(g) + ", CPU " + std::to_string(w);
  }
  return "";
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all{
      {"GQA 4 : 2, documents of 5, 1 and 6 tokens beside one of 12", 4, 2, 16, 12, 0, 0.0, 0.0, {{5, 1, 6}, {12}}},
      {"window 5 in a ring buffer of 5 slots (wrapping twice), softcap 2, scale 0.7, GQA 2 : 1", 2, 1, 8, 5, 5, 0.7,
       2.0, {{13}, {4, 9}}},
      {"window 6 in a cache of 10 slots, softcap 30", 2, 2, 8, 10, 6, 0.0, 30.0, {{3, 7}, {10}}},
      {"head_dim 72 (3 key subsets, a partial warp of columns)", 2, 1, 72, 9, 0, 0.0, 0.0, {{9}, {2, 7}}},
      {"head_dim 260 (two column passes)", 2, 2, 260, 8, 0, 0.0, 0.0, {{5, 3}}},
      {"70 rows (two launches)", 2, 1, 3, 3, 0, 0.0, 0.0, std::vector<std::vector<index_t>>(70, {2, 1})},
  };
  return all;
}

template <class T>
void check_against_cpu() {
  for (const Case& c : cases()) {
    INFO(c.name);
    std::vector<T> k_cpu, k_gpu;
    const std::vector<T> want = decode<T>(c, Kernel::cpu, -1, &k_cpu), got = decode<T>(c, Kernel::emulated, -1, &k_gpu);
    CHECK(compare(got, want, kTolerance<T>) == "");
    CHECK(same_bits(k_gpu, k_cpu));  // the cache writes are copies: bitwise, NaN in the slots never written
  }
}

}  // namespace

TEST_CASE("decode attention: CUDA kernel on the emulator vs the CPU kernel, float", "[decode]") {
  check_against_cpu<float>();
}

TEST_CASE("decode attention: CUDA kernel on the emulator vs the CPU kernel, double", "[decode]") {
  check_against_cpu<double>();
}

// 300 keys visible (more than the block's 256 threads and 8 warps take in one round), in a ring of
// 320 slots holding keys from before the window, from a cache filled beforehand.
TEST_CASE("decode attention: a full cache of 300 visible keys in 320 slots, at position 1000", "[decode]") {
  const index_t H = 4, Hkv = 2, D = 32, slots = 320, batch = 2;
  AttentionDecodeParams p;
  p.batch = batch;
  p.heads = H;
  p.kv_heads = Hkv;
  p.head_dim = D;
  p.slots = slots;
  p.scale = 0.2;
  p.softcap = 20.0;
  Rng rng(5);
  const std::vector<double> k0 = uniform<double>(static_cast<std::size_t>(batch * slots * Hkv * D), rng),
                            v0 = uniform<double>(k0.size(), rng), q = uniform<double>(static_cast<std::size_t>(batch * H * D), rng),
                            kn = uniform<double>(static_cast<std::size_t>(batch * Hkv * D), rng),
                            vn = uniform<double>(kn.size(), rng);
  const std::vector<DecodeRow> rows{kernels::decode_row(slots, 1000, slots, 300), kernels::decode_row(17, 17, slots, 0)};
  REQUIRE(rows[0].visible == 300);
  REQUIRE(rows[1].visible == 18);
  kernels::check_decode_rows("test", p, rows.data());
  std::vector<double> k_cpu = k0, v_cpu = v0, k_gpu = k0, v_gpu = v0, o_cpu(q.size()), o_gpu(q.size());
  kernels::DecodeAttention<Cpu>::step(p, AttentionDecodeArgs<double>{q.data(), kn.data(), vn.data(), k_cpu.data(),
                                                                       v_cpu.data(), o_cpu.data(), rows.data()});
  emulated_decode_step(p, AttentionDecodeArgs<double>{q.data(), kn.data(), vn.data(), k_gpu.data(), v_gpu.data(),
                                                      o_gpu.data(), rows.data()});
  CHECK(compare(o_gpu, o_cpu, kTolerance<double>) == "");
  CHECK(same_bits(k_gpu, k_cpu));
  CHECK(same_bits(v_gpu, v_cpu));
}

TEST_CASE("decode attention: the CUDA kernel gives the same bits run to run and under reversed and greedy schedules", "[decode]") {
  const Case& c = cases()[1];
  check_same_bits_under_schedules([&] { return std::vector<std::vector<float>>{decode<float>(c, Kernel::emulated)}; });
}

TEST_CASE("decode attention: another row's tokens never reach a row's outputs (bitwise)", "[decode]") {
  const Case& c = cases()[0];
  const index_t H = c.heads, D = c.head_dim, batch = static_cast<index_t>(c.documents.size());
  for (Kernel kernel : {Kernel::cpu, Kernel::emulated}) {
    const std::vector<float> base = decode<float>(c, kernel), perturbed = decode<float>(c, kernel, /*perturbed_row=*/1);
    bool row0_same = true, row1_changed = false;
    for (std::size_t i = 0; i < base.size(); ++i) {
      const bool row0 = static_cast<index_t>(i) / (H * D) % batch == 0;
      if (row0) row0_same = row0_same && std::memcmp(&base[i], &perturbed[i], sizeof(float)) == 0;
      else row1_changed = row1_changed || base[i] != perturbed[i];
    }
    CHECK(row0_same);
    CHECK(row1_changed);
  }
}

namespace {

struct StepCase {
  const char* name;
  kernels::SsmStepParams p;  // batch and sizes
  index_t tokens;
  std::vector<index_t> resets;  // tokens at which row 0 starts a new document (its caches zeroed)
};

// The caches and outputs of a run of SsmStep over `tokens` tokens.
template <class T>
struct StepRun {
  std::vector<T> state, theta, k_prev, v_prev, y;  // y: every token's, in order
};

template <class T>
StepRun<T> run_steps(const StepCase& c, Kernel kernel) {
  const kernels::SsmStepParams& p = c.p;
  const index_t B = p.batch, H = p.heads, R = p.rank, N = p.d_state, P = p.head_dim, S = p.angles, G = p.groups;
  const auto n = [](index_t count) { return static_cast<std::size_t>(count); };
  StepRun<T> run{std::vector<T>(n(B * H * N * P)), std::vector<T>(n(B * H * S)), std::vector<T>(n(B * H * R * N)),
                 std::vector<T>(n(B * H * R * P)), {}};
  Rng rng(21);
  const std::vector<T> b_bias = uniform<T>(n(H * R * N), rng), c_bias = uniform<T>(n(H * R * N), rng),
                       D = uniform<T>(n(H), rng);
  for (index_t t = 0; t < c.tokens; ++t) {
    if (std::find(c.resets.begin(), c.resets.end(), t) != c.resets.end())
      for (auto* cache : {&run.state, &run.theta, &run.k_prev, &run.v_prev})
        std::fill(cache->begin(), cache->begin() + static_cast<std::ptrdiff_t>(cache->size() / n(B)), T(0));
    const std::vector<T> b = uniform<T>(n(B * G * R * N), rng), cc = uniform<T>(n(B * G * R * N), rng),
                         angle = uniform<T>(n(B * S), rng), v = uniform<T>(n(B * H * R * P), rng),
                         gamma = uniform<T>(n(B * H), rng), shift = uniform<T>(n(B * H), rng);
    std::vector<T> dt = uniform<T>(n(B * H), rng), log_alpha = uniform<T>(n(B * H), rng);
    for (T& x : dt) x = (x + 1) / 2;                // dt > 0
    for (T& x : log_alpha) x = -(x + 1) / 2;        // alpha in (e^-1, 1]
    std::vector<T> y(n(B * H * R * P), std::numeric_limits<T>::quiet_NaN());
    const kernels::SsmStepArgs<T> a{b.data(),         cc.data(),        b_bias.data(),     c_bias.data(),
                                    angle.data(),     dt.data(),        v.data(),          log_alpha.data(),
                                    gamma.data(),     shift.data(),     D.data(),          run.state.data(),
                                    run.theta.data(), run.k_prev.data(), run.v_prev.data(), y.data()};
    if (kernel == Kernel::cpu) kernels::SsmStep<Cpu>::step(p, a);
    else emulated_ssm_step(p, a);
    run.y.insert(run.y.end(), y.begin(), y.end());
  }
  return run;
}

const std::vector<StepCase>& step_cases() {
  static const std::vector<StepCase> all{
      {"SISO, 2 rows x 3 heads, d_state 6 with 2 angles, head_dim 5; row 0 restarts at tokens 3 and 4",
       {2, 3, 1, 6, 5, 2}, 7, {3, 4}},
      {"MIMO rank 3, d_state 8 with every pair rotated, head_dim 4", {1, 2, 3, 8, 4, 4}, 5, {}},
      {"head_dim 130 (more columns than the block's 128 threads), MIMO rank 2", {2, 1, 2, 4, 130, 1}, 3, {1}},
      {"Mamba-2's step: 6 heads in 3 groups of B and C, SISO, no angles", {2, 6, 1, 4, 5, 0, 3}, 4, {2}},
  };
  return all;
}

template <class T>
void check_step_bitwise() {
  for (const StepCase& c : step_cases()) {
    INFO(c.name);
    const StepRun<T> want = run_steps<T>(c, Kernel::cpu), got = run_steps<T>(c, Kernel::emulated);
    CHECK(same_bits(got.y, want.y));
    CHECK(same_bits(got.state, want.state));
    CHECK(same_bits(got.theta, want.theta));
    CHECK(same_bits(got.k_prev, want.k_prev));
    CHECK(same_bits(got.v_prev, want.v_prev));
    CHECK(compare(got.y, want.y, 0.0) == "");  // finite too
  }
}

}  // namespace

TEST_CASE("Mamba-3 decode step: CUDA kernel on the emulator is bitwise the CPU kernel, float", "[decode]") {
  check_step_bitwise<float>();
}

TEST_CASE("Mamba-3 decode step: CUDA kernel on the emulator is bitwise the CPU kernel, double", "[decode]") {
  check_step_bitwise<double>();
}

namespace {

struct M2RNNCase {
  const char* name;
  kernels::M2RNNStepParams p;   // batch and sizes
  index_t tokens;
  std::vector<index_t> resets;  // tokens at which row 0 starts a new document (its state zeroed)
};

// The state and every token's y after a run of M2RNNStep over `tokens` tokens.
template <class T>
std::pair<std::vector<T>, std::vector<T>> run_m2rnn(const M2RNNCase& c, Kernel kernel) {
  const kernels::M2RNNStepParams& p = c.p;
  const index_t B = p.batch, H = p.heads, K = p.k_dim, V = p.v_dim;
  const auto n = [](index_t count) { return static_cast<std::size_t>(count); };
  std::vector<T> state(n(B * H * K * V)), ys;
  Rng rng(34);
  std::vector<T> W = uniform<T>(n(H * V * V), rng);
  for (T& w : W) w /= static_cast<T>(V);  // rows of W sum to O(1), as the layer's identity start
  for (index_t t = 0; t < c.tokens; ++t) {
    if (std::find(c.resets.begin(), c.resets.end(), t) != c.resets.end())
      std::fill(state.begin(), state.begin() + static_cast<std::ptrdiff_t>(state.size() / n(B)), T(0));
    const std::vector<T> q = uniform<T>(n(B * H * K), rng), k = uniform<T>(n(B * H * K), rng), v = uniform<T>(n(B * H * V), rng);
    std::vector<T> f = uniform<T>(n(B * H), rng);
    for (T& x : f) x = (x + 1) / 2;  // a gate in [0, 1)
    std::vector<T> y(n(B * H * V), std::numeric_limits<T>::quiet_NaN());
    const kernels::M2RNNStepArgs<T> a{q.data(), k.data(), v.data(), f.data(), W.data(), state.data(), y.data()};
    if (kernel == Kernel::cpu) kernels::M2RNNStep<Cpu>::step(p, a);
    else emulated_m2rnn_step(p, a);
    ys.insert(ys.end(), y.begin(), y.end());
  }
  return {state, ys};
}

const std::vector<M2RNNCase>& m2rnn_cases() {
  static const std::vector<M2RNNCase> all{
      {"2 rows x 3 heads, K 4, V 5; row 0 restarts at tokens 2 and 3", {2, 3, 4, 5}, 6, {2, 3}},
      {"the layer's default head: K 64, V 16", {1, 2, 64, 16}, 3, {}},
      {"V 130 (more columns than the block's 128 threads), K 3", {2, 1, 3, 130}, 3, {1}},
  };
  return all;
}

template <class T>
void check_m2rnn_bitwise() {
  for (const M2RNNCase& c : m2rnn_cases()) {
    INFO(c.name);
    const auto want = run_m2rnn<T>(c, Kernel::cpu), got = run_m2rnn<T>(c, Kernel::emulated);
    CHECK(same_bits(got.first, want.first));
    CHECK(same_bits(got.second, want.second));
    CHECK(compare(got.second, want.second, 0.0) == "");  // finite too
  }
}

}  // namespace

TEST_CASE("M2RNN decode step: CUDA kernel on the emulator is bitwise the CPU kernel, float", "[decode]") {
  check_m2rnn_bitwise<float>();
}

TEST_CASE("M2RNN decode step: CUDA kernel on the emulator is bitwise the CPU kernel, double", "[decode]") {
  check_m2rnn_bitwise<double>();
}

TEST_CASE("M2RNN decode step: the same bits run to run and under reversed and greedy schedules", "[decode]") {
  const M2RNNCase& c = m2rnn_cases().front();
  check_same_bits_under_schedules([&] {
    const auto [state, out] = run_m2rnn<float>(c, Kernel::emulated);
    return std::vector<std::vector<float>>{state, out};
  });
}

}  // namespace megacpp::cuda_emulation
