// Mamba ops: softplus/clamp, rotary angles, rotary_qk, doc-aware conv1d, and the chunked scan
// against the literal recurrence; gradchecks of every op in double; masking invariants bitwise.
#include "support/documents_testing.hpp"
#include "support/op_testing.hpp"

#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <tuple>

#include "megacpp/nn/mamba.hpp"

using namespace megacpp;
using namespace megacpp::testing;
using Catch::Matchers::Contains;

namespace {

using Docs = DocumentLayout<Cpu>;
constexpr std::int32_t kBos = 0;

Docs docs_from_lengths(const std::vector<std::vector<index_t>>& rows) { return packed_layout(rows, kBos); }

V64 param_from(const std::vector<double>& v, Shape s) { return V64::parameter(T64::from_host(s, v)); }

// Random scan operands in the ranges the layers produce: log_alpha = A dt < 0, gamma and shift in (0, dt).
struct ScanCase {
  index_t batch, seq, heads, groups, rank, N, P;
  bool with_shift = true, with_D = true;
};
ScanInputs<double, Cpu> random_scan_inputs(const ScanCase& c, std::uint64_t seed) {
  Rng rng(seed);
  auto uniform = [&](Shape s, double lo, double hi) { return V64::parameter(rand_uniform<double, Cpu>(s, rng, lo, hi)); };
  ScanInputs<double, Cpu> in;
  in.q = V64::parameter(randn<double, Cpu>({c.batch, c.seq, c.groups, c.rank, c.N}, rng, 0.7));
  in.k = V64::parameter(randn<double, Cpu>({c.batch, c.seq, c.groups, c.rank, c.N}, rng, 0.7));
  in.v = V64::parameter(randn<double, Cpu>({c.batch, c.seq, c.heads, c.rank, c.P}, rng));
  in.log_alpha = uniform({c.batch, c.seq, c.heads}, -0.9, -0.05);
  in.gamma = uniform({c.batch, c.seq, c.heads}, 0.05, 0.6);
  if (c.with_shift) in.shift = uniform({c.batch, c.seq, c.heads}, 0.05, 0.6);
  if (c.with_D) in.D = V64::parameter(randn<double, Cpu>({c.heads}, rng));
  return in;
}

std::vector<V64> operands(const ScanInputs<double, Cpu>& in) {
  std::vector<V64> v{in.q, in.k, in.v, in.log_alpha, in.gamma};
  if (in.shift.defined()) v.push_back(in.shift);
  if (in.D.defined()) v.push_back(in.D);
  return v;
}
ScanInputs<double, Cpu> with_operands(const ScanInputs<double, Cpu>& shape_of, const std::vector<V64>& v) {
  ScanInputs<double, Cpu> in;
  in.q = v[0];
  in.k = v[1];
  in.v = v[2];
  in.log_alpha = v[3];
  in.gamma = v[4];
  std::size_t i = 5;
  if (shape_of.shift.defined()) in.shift = v[i++];
  if (shape_of.D.defined()) in.D = v[i++];
  return in;
}

double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(1.0, std::abs(b[i])));
  return worst;
}

}  // namespace

TEST_CASE("softplus and clamp_max: values and gradients", "[mamba][ops]") {
  auto x = param_from({-30.0, -2.0, 0.0, 0.5, 3.0, 25.0}, {6});
  const auto y = softplus(x).value().to_host();
  CHECK(y[0] == Approx(std::log1p(std::exp(-30.0))));
  CHECK(y[2] == Approx(std::log(2.0)));
  CHECK(y[5] == 25.0);  // identity above the threshold 20
  const auto c = clamp_max(x, 0.25).value().to_host();
  CHECK(c == std::vector<double>{-30.0, -2.0, 0.0, 0.25, 0.25, 0.25});
  auto x2 = random_param({3, 5}, 1);
  require_gradcheck("softplus", [](auto& in) { return softplus(in[0]); }, {x2});
  require_gradcheck("clamp_max", [](auto& in) { return clamp_max(in[0], 0.3); }, {x2});
}

TEST_CASE("heavy_tail: the reference's A activation, values, gradients and the A rule of both policies", "[mamba][ops]") {
  // phi(x) = 1 + x for x >= 0, 1 / (1 - x) below (state-spaces/mamba mamba3.py, commit c69aaab)
  auto x = param_from({-1e6, -3.0, -0.5, 0.0, 0.5, 7.0}, {6});
  CHECK(heavy_tail(x).value().to_host() == std::vector<double>{1.0 / (1.0 + 1e6), 0.25, 1.0 / 1.5, 1.0, 1.5, 8.0});
  // the slope is 1 / (1 - x)^2 below 0 and 1 above, continuous at 0 (a wrong branch shows here)
  backward(sum(heavy_tail(x)));
  const auto g = x.grad().to_host();
  CHECK(g[1] == Approx(1.0 / 16.0));
  CHECK(g[2] == Approx(1.0 / 2.25));
  CHECK(g[3] == 1.0);
  CHECK(g[5] == 1.0);
  // gradcheck on both branches (points well away from 0, where the second derivative jumps)
  auto x2 = param_from({-4.0, -1.3, -0.2, 0.3, 1.1, 2.5}, {2, 3});
  require_gradcheck("heavy_tail", [](auto& in) { return heavy_tail(in[0]); }, {x2});
  // A = min(-phi(dd_A), -A_floor) with each policy: the heavy tail keeps |A| larger for negative dd_A
  auto dd = param_from({-20.0, -1.0, 0.0, 2.0}, {4});
  const auto a_heavy = clamp_max(-HeavyTailA::phi(dd), -1e-4).value().to_host();
  const auto a_soft = clamp_max(-SoftplusA::phi(dd), -1e-4).value().to_host();
  CHECK(a_heavy == std::vector<double>{-1.0 / 21.0, -0.5, -1.0, -3.0});
  CHECK(a_soft[0] == -1e-4);  // softplus(-20) = 2e-9 hits the floor
  CHECK(a_soft[2] == Approx(-std::log(2.0)));
  require_gradcheck("A rule, heavy-tail", [](auto& in) { return clamp_max(-HeavyTailA::phi(in[0]), -1e-4); }, {x2});
}

TEST_CASE("rotary_angles: cumulative pi tanh(angle) dt, restarting at every document", "[mamba][ops][rotary]") {
  const Docs docs = docs_from_lengths({{3, 1, 4}, {5, 3}});
  const index_t B = 2, T = 8, H = 2, S = 3;
  auto angle = random_param({B, T, S}, 3);
  Rng rng(4);
  auto dt = V64::parameter(rand_uniform<double, Cpu>({B, T, H}, rng, 0.1, 2.0));
  const auto cs = rotary_angles(angle, dt, docs).value().to_host();
  const auto a = angle.value().to_host(), d = dt.value().to_host();
  for (index_t b = 0; b < B; ++b)
    for (index_t h = 0; h < H; ++h)
      for (index_t s = 0; s < S; ++s) {
        double theta = 0;
        for (index_t t = 0; t < T; ++t) {
          if (t == 0 || docs.doc_ids_host[b * T + t] != docs.doc_ids_host[b * T + t - 1]) theta = 0;
          theta += std::numbers::pi * std::tanh(a[(b * T + t) * S + s]) * d[(b * T + t) * H + h];
          const index_t at = ((b * T + t) * H + h) * S + s;
          REQUIRE(cs[2 * at] == Approx(std::cos(theta)).margin(1e-12));
          REQUIRE(cs[2 * at + 1] == Approx(std::sin(theta)).margin(1e-12));
        }
      }
  require_gradcheck("rotary_angles", [&](auto& in) { return rotary_angles(in[0], in[1], docs); }, {angle, dt});
  CHECK_THROWS_WITH(rotary_angles(angle, random_param({B, T + 1, H}, 5), docs), Contains("disagree on (batch, seq)"));
}

TEST_CASE("rotary_qk: bias per head, pairs (2i, 2i+1) rotated, the rest untouched", "[mamba][ops][rotary]") {
  const Docs docs = docs_from_lengths({{2, 3}});
  const index_t B = 1, T = 5, H = 2, R = 2, N = 6, S = 2;
  auto x = random_param({B, T, R, N}, 6);
  auto bias = random_param({H, R, N}, 7);
  auto angle = random_param({B, T, S}, 8);
  auto dt = random_param({B, T, H}, 9, 0.5, 1.0);
  auto cs = rotary_angles(angle, dt, docs);
  const auto y = rotary_qk(x, bias, cs).value().to_host();
  const auto xv = x.value().to_host(), bv = bias.value().to_host(), c = cs.value().to_host();
  for (index_t t = 0; t < T; ++t)
    for (index_t h = 0; h < H; ++h)
      for (index_t r = 0; r < R; ++r)
        for (index_t n = 0; n < N; ++n) {
          const double u = xv[(t * R + r) * N + n] + bv[(h * R + r) * N + n];
          const double got = y[((t * H + h) * R + r) * N + n];
          if (n >= 2 * S) {
            REQUIRE(got == u);
            continue;
          }
          const index_t i = n / 2;
          const double cosv = c[2 * ((t * H + h) * S + i)], sinv = c[2 * ((t * H + h) * S + i) + 1];
          const double u0 = xv[(t * R + r) * N + 2 * i] + bv[(h * R + r) * N + 2 * i];
          const double u1 = xv[(t * R + r) * N + 2 * i + 1] + bv[(h * R + r) * N + 2 * i + 1];
          REQUIRE(got == Approx(n % 2 == 0 ? u0 * cosv - u1 * sinv : u0 * sinv + u1 * cosv));
        }
  auto cs_leaf = V64::parameter(cs.value().clone());
  require_gradcheck("rotary_qk", [](auto& in) { return rotary_qk(in[0], in[1], in[2]); }, {x, bias, cs_leaf});
  CHECK_THROWS_WITH(rotary_qk(random_param({B, T, R, 3}, 1), random_param({H, R, 3}, 2), cs), Contains("exceeds d_state 3"));
}

TEST_CASE("causal_conv1d: depthwise causal taps that read zero across documents", "[mamba][ops][conv1d]") {
  const Docs docs = docs_from_lengths({{2, 1, 5}, {8}});
  const index_t B = 2, T = 8, C = 3, K = 4;
  auto x = random_param({B, T, C}, 10);
  auto w = random_param({C, K}, 11);
  auto bias = random_param({C}, 12);
  const auto y = causal_conv1d(x, w, bias, docs).value().to_host();
  const auto xv = x.value().to_host(), wv = w.value().to_host(), bv = bias.value().to_host();
  for (index_t b = 0; b < B; ++b)
    for (index_t t = 0; t < T; ++t)
      for (index_t c = 0; c < C; ++c) {
        double ref = bv[c];
        for (index_t j = 0; j < K; ++j) {
          const index_t src = t - (K - 1) + j;
          if (src >= 0 && docs.same_document(b, src, t)) ref += wv[c * K + j] * xv[(b * T + src) * C + c];
        }
        REQUIRE(y[(b * T + t) * C + c] == Approx(ref));
      }
  // The single-token document (row 0, token 2) sees only its own tap: y = bias + w[:, K-1] x.
  for (index_t c = 0; c < C; ++c) CHECK(y[2 * C + c] == bv[c] + wv[c * K + K - 1] * xv[2 * C + c]);
  // Taps into another document read zero bitwise: NaN in row 0's first two documents cannot reach
  // the third document's outputs (a tap multiplied by zero would turn them into NaN).
  {
    NoGrad no_grad;
    auto poisoned = xv;
    for (index_t i = 0; i < 3 * C; ++i) poisoned[static_cast<std::size_t>(i)] = std::numeric_limits<double>::quiet_NaN();
    const auto yp = causal_conv1d(V64(T64::from_host(x.shape(), poisoned)), w, bias, docs).value().to_host();
    for (index_t i = 3 * C; i < T * C; ++i) REQUIRE(yp[static_cast<std::size_t>(i)] == y[static_cast<std::size_t>(i)]);
  }
  require_gradcheck("causal_conv1d", [&](auto& in) { return causal_conv1d(in[0], in[1], in[2], docs); }, {x, w, bias});
  require_gradcheck("causal_conv1d (no bias)", [&](auto& in) { return causal_conv1d(in[0], in[1], V64(), docs); }, {x, w});
  CHECK_THROWS_WITH(causal_conv1d(x, random_param({C + 1, K}, 1), bias, docs), Contains("needs 3 channels"));
}

TEST_CASE("chunked_scan equals the sequential recurrence to 1e-10 (SISO, MIMO, Mamba-2, every chunk size)",
          "[mamba][scan]") {
  // Row 0: documents of 1, 3 (shorter than most chunks), 9 and 7 tokens (spanning chunks);
  // row 1: 12, 1, 1, 6 tokens.
  const Docs docs = docs_from_lengths({{1, 3, 9, 7}, {12, 1, 1, 6}});
  const std::vector<std::pair<const char*, ScanCase>> cases{
      {"SISO (trapezoid, head-wise q/k)", {2, 20, 3, 3, 1, 6, 5}},
      {"MIMO rank 3", {2, 20, 2, 2, 3, 4, 3}},
      {"Mamba-2 (one group, no shift)", {2, 20, 4, 1, 1, 5, 3, false, true}},
      {"two groups, no D", {2, 20, 4, 2, 2, 3, 2, true, false}},
  };
  for (const auto& [name, c] : cases) {
    const auto in = random_scan_inputs(c, 42);
    std::vector<double> reference;
    {
      NoGrad no_grad;
      reference = sequential_scan(in, docs).value().to_host();
    }
    for (index_t chunk : {1, 2, 3, 4, 5, 8, 64}) {
      INFO(name << ", chunk " << chunk);
      NoGrad no_grad;
      const auto y = chunked_scan(in, docs, chunk).value().to_host();
      CHECK(max_rel_diff(y, reference) < 1e-10);
    }
    // the same with gradients recorded (the states are saved for the backward): same values
    const auto y = chunked_scan(in, docs, 4).value().to_host();
    CHECK(max_rel_diff(y, reference) < 1e-10);
  }
}

TEST_CASE("chunked_scan: gradcheck of every operand across document and chunk boundaries", "[mamba][scan][gradcheck]") {
  // Documents of 1, 2, 3 and 4, 2 tokens; chunks of 2 or 3 tokens, so documents span chunks and
  // the state is carried across chunk boundaries inside a document.
  const Docs docs = docs_from_lengths({{1, 2, 3}, {4, 2}});
  const std::vector<std::tuple<const char*, ScanCase, index_t>> cases{
      {"SISO", {2, 6, 2, 2, 1, 3, 2}, 2},
      {"MIMO rank 2", {2, 6, 1, 1, 2, 3, 2}, 3},
      {"Mamba-2 (groups < heads, no shift)", {2, 6, 2, 1, 1, 3, 2, false, true}, 2},
  };
  for (const auto& [name, c, chunk_size] : cases) {
    const index_t chunk = chunk_size;  // a plain variable: clang 14 cannot capture a structured binding
    const auto in = random_scan_inputs(c, 7);
    require_gradcheck(std::string(name) + ", chunk " + std::to_string(chunk), [&](auto& v) {
      return chunked_scan(with_operands(in, v), docs, chunk);
    }, operands(in));
  }
}

namespace {
// pack [A x TA][B x TB] in one row: B's scan outputs equal B alone bitwise for every chunk size,
// and poisoning A's operands with NaN and 1e300 leaves them unchanged.
void check_pack_equals_alone(index_t TA, index_t TB, index_t H, index_t R, index_t N, index_t P,
                             const std::vector<index_t>& chunks) {
  const ScanCase packed{1, TA + TB, H, H, R, N, P};
  const Docs docs_packed = docs_from_lengths({{TA, TB}});
  const Docs docs_alone = docs_from_lengths({{TB}});
  auto in = random_scan_inputs(packed, 5);
  // B alone: the same per-token operands, rows [TA, TA + TB) of the pack.
  auto tail = [&](const V64& x) {
    const index_t per_token = x.numel() / (TA + TB);
    const auto all = x.value().to_host();
    Shape s = x.shape();
    s.set(1, TB);
    return V64::parameter(T64::from_host(s, std::vector<double>(all.begin() + TA * per_token, all.end())));
  };
  ScanInputs<double, Cpu> in_b{tail(in.q), tail(in.k), tail(in.v), tail(in.log_alpha), tail(in.gamma), tail(in.shift), in.D};
  auto b_rows = [&](const std::vector<double>& y) {
    const std::size_t per_token = y.size() / static_cast<std::size_t>(TA + TB);
    return std::vector<double>(y.begin() + TA * static_cast<std::ptrdiff_t>(per_token), y.end());
  };
  NoGrad no_grad;
  for (index_t chunk : chunks) {
    INFO("TA " << TA << ", TB " << TB << ", rank " << R << ", P " << P << ", chunk " << chunk);
    const auto y_alone = chunked_scan(in_b, docs_alone, chunk).value().to_host();
    const auto y_pack = b_rows(chunked_scan(in, docs_packed, chunk).value().to_host());
    CHECK(y_pack == y_alone);  // bitwise
    // Poison A: NaN and huge values in every operand of A's tokens. Any state or trapezoid term
    // leaking across the boundary (even multiplied by a zero decay) would turn B into NaN.
    ScanInputs<double, Cpu> poisoned = in;
    for (V64* x : {&poisoned.q, &poisoned.k, &poisoned.v, &poisoned.log_alpha, &poisoned.gamma, &poisoned.shift}) {
      auto vals = x->value().to_host();
      const std::size_t per_token = vals.size() / static_cast<std::size_t>(TA + TB);
      for (std::size_t i = 0; i < static_cast<std::size_t>(TA) * per_token; ++i)
        vals[i] = i % 2 ? std::numeric_limits<double>::quiet_NaN() : 1e300;
      *x = V64(T64::from_host(x->shape(), vals));
    }
    CHECK(b_rows(chunked_scan(poisoned, docs_packed, chunk).value().to_host()) == y_alone);
    CHECK(b_rows(sequential_scan(poisoned, docs_packed).value().to_host()) ==
          b_rows(sequential_scan(in, docs_packed).value().to_host()));
  }
}
}  // namespace

TEST_CASE("chunked_scan: documents are isolated bitwise (pack == alone, A cannot reach B)", "[mamba][scan][masking]") {
  // B spans two chunks of 4 and starts mid-chunk of the row grid.
  check_pack_equals_alone(5, 7, 2, 2, 4, 3, {1, 3, 4, 64});
  // Documents longer than the forward's 32-token pieces, with P = 17 so that B's rows, read in
  // place at rank 1, sit at a different alignment in the pack than alone; the piece tiles of
  // small_gemm (several packets of P) and its leftover column both run.
  check_pack_equals_alone(37, 90, 2, 1, 8, 17, {16, 33, 64, 100});
  check_pack_equals_alone(41, 75, 1, 2, 8, 17, {64});
}

TEST_CASE("chunked_scan: long documents split into forward pieces equal the recurrence, values and gradients",
          "[mamba][scan]") {
  // Chunks and documents longer than the forward's 32-token pieces (the short-document tests above
  // never split a chunk), P >= 16 so the register tiles run; gradients through the saved
  // chunk-entry states must match those of 1-token chunks, where no piece is ever split.
  const Docs docs = docs_from_lengths({{1, 40, 70, 39}, {100, 50}});
  const std::vector<std::pair<const char*, ScanCase>> cases{
      {"SISO, P 17", {2, 150, 2, 2, 1, 8, 17}},
      {"MIMO rank 2, P 16", {2, 150, 2, 1, 2, 6, 16}},
      {"Mamba-2, P 24", {2, 150, 2, 1, 1, 8, 24, false, true}},
  };
  for (const auto& [case_name, c] : cases) {
    const char* const name = case_name;  // a plain variable: clang 14 cannot capture a structured binding
    const auto in = random_scan_inputs(c, 11);
    std::vector<double> reference;
    {
      NoGrad no_grad;
      reference = sequential_scan(in, docs).value().to_host();
    }
    Rng rng(12);
    const auto weights = V64(randn<double, Cpu>(Shape{c.batch, c.seq, c.heads, c.rank, c.P}, rng));
    auto grads_with_chunk = [&](index_t chunk) {
      const auto ops = operands(in);
      std::vector<V64> fresh;
      for (const V64& x : ops) fresh.push_back(V64::parameter(x.value().clone()));
      auto y = chunked_scan(with_operands(in, fresh), docs, chunk);
      INFO(name << ", chunk " << chunk);
      CHECK(max_rel_diff(y.value().to_host(), reference) < 1e-10);
      backward(sum(mul(y, weights)));
      std::vector<std::vector<double>> g;
      for (const V64& x : fresh) g.push_back(x.grad().to_host());
      return g;
    };
    const auto g_one = grads_with_chunk(1);
    for (index_t chunk : {33, 64, 100}) {
      const auto g = grads_with_chunk(chunk);
      for (std::size_t i = 0; i < g.size(); ++i) {
        INFO(name << ", chunk " << chunk << ", operand " << i);
        CHECK(max_rel_diff(g[i], g_one[i]) < 1e-10);
      }
    }
  }
}

TEST_CASE("chunked_scan: a loss on document B has exactly zero gradient on A's operands", "[mamba][scan][masking]") {
  const index_t TA = 4, TB = 6;
  const Docs docs = docs_from_lengths({{TA, TB}});
  for (const ScanCase& c : {ScanCase{1, TA + TB, 2, 2, 1, 4, 3}, ScanCase{1, TA + TB, 2, 1, 1, 4, 3, false, true}}) {
    auto in = random_scan_inputs(c, 9);
    auto y = chunked_scan(in, docs, 4);
    std::vector<double> w(static_cast<std::size_t>(y.numel()), 0.0);  // loss weights: B's rows only
    const std::size_t per_token = w.size() / static_cast<std::size_t>(TA + TB);
    for (std::size_t i = static_cast<std::size_t>(TA) * per_token; i < w.size(); ++i) w[i] = 1.0 + 0.01 * static_cast<double>(i);
    backward(sum(mul(y, V64(T64::from_host(y.shape(), w)))));
    for (const V64& x : operands(in)) {
      if (x.shape() == Shape{c.heads}) continue;  // D is shared by all tokens
      const auto g = x.grad().to_host();
      const std::size_t per = g.size() / static_cast<std::size_t>(TA + TB);
      bool a_zero = true, b_nonzero = false;
      for (std::size_t i = 0; i < g.size(); ++i) {
        if (i < static_cast<std::size_t>(TA) * per) a_zero = a_zero && g[i] == 0.0 && !std::signbit(g[i]);
        else b_nonzero = b_nonzero || g[i] != 0.0;
      }
      CHECK(a_zero);
      CHECK(b_nonzero);
    }
  }
}

TEST_CASE("scan operands: shape errors name the operand and the expected shape", "[mamba][scan][errors]") {
  const Docs docs = docs_from_lengths({{3, 2}});
  auto in = random_scan_inputs({1, 5, 2, 2, 1, 4, 3}, 1);
  auto bad = in;
  bad.v = random_param({1, 5, 3, 1, 3}, 2);
  CHECK_THROWS_WITH(chunked_scan(bad, docs), Contains("heads (3) must be a multiple of groups (2)"));
  bad = in;
  bad.gamma = random_param({1, 5, 3}, 2);
  CHECK_THROWS_WITH(chunked_scan(bad, docs), Contains("gamma (1, 5, 3) must be (1, 5, 2)"));
  CHECK_THROWS_WITH(chunked_scan(in, docs_from_lengths({{6}})), Contains("document layout (1, 6) does not match"));
  CHECK_THROWS_WITH(chunked_scan(in, docs, 0), Contains("chunk_size must be >= 1"));
  CHECK_THROWS_WITH(sequential_scan(in, docs), Contains("forward-only"));
}

TEST_CASE("Mamba kernels: results and gradients do not depend on the thread count", "[mamba][determinism]") {
  // Every output element is owned by one thread and computed in a fixed order, so 1 and 2
  // threads must agree bitwise (scan forward and backward, rotary ops, conv1d).
  const Docs docs = docs_from_lengths({{3, 9, 4}, {16}});
  auto run = [&] {
    const auto in = random_scan_inputs({2, 16, 4, 2, 1, 8, 4}, 3);
    auto y = chunked_scan(in, docs, 4);
    auto angle = random_param({2, 16, 2}, 4);
    auto dt = random_param({2, 16, 4}, 5, 0.3, 1.0);
    auto cs = rotary_angles(angle, dt, docs);
    auto k = rotary_qk(random_param({2, 16, 1, 8}, 6), random_param({4, 1, 8}, 7), cs);
    auto x = random_param({2, 16, 6}, 8);
    auto c = causal_conv1d(x, random_param({6, 4}, 9), random_param({6}, 10), docs);
    backward(sum(y) + sum(mul(k, k)) + sum(mul(c, c)));
    std::vector<std::vector<double>> out{y.value().to_host(), k.value().to_host(), c.value().to_host()};
    for (const V64& v : operands(in)) out.push_back(v.grad().to_host());
    for (const V64* v : {&angle, &dt, &x}) out.push_back(v->grad().to_host());
    return out;
  };
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto one = run();
  omp_set_num_threads(2);
  const auto two = run();
  omp_set_num_threads(threads);
  REQUIRE(one.size() == two.size());
  for (std::size_t i = 0; i < one.size(); ++i) {
    INFO("result " << i);
    CHECK(one[i] == two[i]);
  }
}
