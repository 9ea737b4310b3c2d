// tests/cuda_emulation/test_rotary.cpp: Mamba-3's rotary kernels on CUDA (SsmRotary<Cuda>,
// detail/ssm/rotary.cuh) on the emulator against the CPU kernels (cpu/detail/ssm/rotary.hpp): the
// layer's path (angles, then the rotation of B, then both backwards), every output and gradient
// (added into non-zero initial values) within rounding of the CPU's, in float and double. The
// rows are long enough that theta and its gradient are scans over several runs of tokens, with
// documents starting inside runs, on a run's first token, and running across many runs; a row of
// 20,000 tokens takes runs longer than the shortest; padding runs around documents. Also: the
// same bits run to run and under the reversed and greedy schedules, and no value crosses a
// document start (bitwise).
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <limits>
#include <type_traits>
#include <vector>

#include "host_arrays.hpp"
#include "rotary_emulated.hpp"
#include "schedules.hpp"

#include "megacpp/backends/cpu/kernels.hpp"

namespace megacpp::cuda_emulation {
namespace {

struct RotaryCase {
  const char* name;
  index_t heads, S, R, N;
  std::vector<std::vector<index_t>> documents;  // per row, its documents' lengths (each row the same total);
                                                // a negative length -n: n padding tokens (doc id -1)
  double float_tolerance = 1e-5;                // against the CPU in float, relative to each output's largest value
};

const std::vector<RotaryCase>& rotary_cases() {
  static const std::vector<RotaryCase> all{
      {"3 heads, 2 of 3 pairs rotated, rank 2: rows of 200 tokens (7 runs), documents inside runs and across them", 3,
       2, 2, 6, {{70, 1, 64, 65}, {200}}},
      {"documents starting on a run's first token, and a 1-token document", 1, 2, 1, 4, {{32, 32, 1, 31}, {64, 64}}},
      {"a row of one run (20 tokens): no carry", 2, 3, 1, 8, {{5, 15}, {20}}},
      // padding runs (from_spans) on either side of documents, inside runs and across them: each
      // padding run is a document of its own, whose angles do not carry into the next one
      {"padding runs around documents, across runs of 32", 2, 2, 1, 4, {{-3, 40, -30, 1, -26}, {-70, 30}}},
      // theta's float rounding grows with a document's length on both backends, each its own way:
      // against the CPU's, as the square root of the length times float's epsilon (documents of
      // 9,000 and 11,000 tokens). The double run bounds the kernels' error at 1e-11.
      {"rows of 20,000 tokens: 500 runs of 40, documents of 9,000 and 11,000 across hundreds of runs", 1, 1, 1, 2,
       {{9000, 11000}, {20000}}, 2e-4},
  };
  return all;
}

template <class T>
struct Problem {
  kernels::RotaryAnglesParams angles;
  kernels::RotaryQKParams qk;
  std::vector<std::int32_t> doc_ids;
  std::vector<T> angle, dt, x, bias, dy;
  explicit Problem(const RotaryCase& c) {
    index_t seq = 0;
    doc_ids = doc_ids_of(c.documents, 5, seq);
    const index_t batch = static_cast<index_t>(c.documents.size());
    angles = {batch, seq, c.heads, c.S};
    qk = {batch, seq, c.heads, c.R, c.N, c.S};
    const auto n = [](index_t count) { return static_cast<std::size_t>(count); };
    Rng rng(91);
    angle = uniform<T>(n(batch * seq * c.S), rng, -2.0, 2.0);
    dt = uniform<T>(n(batch * seq * c.heads), rng, 0.1, 2.0);
    x = uniform<T>(n(batch * seq * c.R * c.N), rng);
    bias = uniform<T>(n(c.heads * c.R * c.N), rng);
    dy = uniform<T>(n(batch * seq * c.heads * c.R * c.N), rng);
  }
};

template <class T>
struct Run {
  std::vector<T> cossin, y, dx, dbias, dcossin, dangle, ddt;
  std::vector<std::vector<T>> outputs() const { return {cossin, y, dx, dbias, dcossin, dangle, ddt}; }
};

enum class Kernels { cpu, emulated };

// The layer's path: cossin, y; then y's backward (dx, dbias, dcossin) and cossin's (dangle, ddt).
// Every gradient starts at 0.25 (the kernels add).
template <class T>
Run<T> run(const Problem<T>& pr, Kernels kernels) {
  const kernels::RotaryAnglesParams& pa = pr.angles;
  const kernels::RotaryQKParams& pq = pr.qk;
  Run<T> r;
  r.cossin.assign(pr.dy.size() / static_cast<std::size_t>(pq.rank * pq.d_state) * static_cast<std::size_t>(pq.n_angles) * 2,
                  std::numeric_limits<T>::quiet_NaN());
  r.y.assign(pr.dy.size(), std::numeric_limits<T>::quiet_NaN());
  r.dx.assign(pr.x.size(), T(0.25));
  r.dbias.assign(pr.bias.size(), T(0.25));
  r.dcossin.assign(r.cossin.size(), T(0.25));
  r.dangle.assign(pr.angle.size(), T(0.25));
  r.ddt.assign(pr.dt.size(), T(0.25));
  const kernels::RotaryAnglesArgs<T> aa{pr.angle.data(), pr.dt.data(), r.cossin.data()};
  const kernels::RotaryQKArgs<T> qa{pr.x.data(), pr.bias.data(), r.cossin.data(), r.y.data()};
  const kernels::RotaryQKGrads<T> qg{pr.dy.data(), r.dx.data(), r.dbias.data(), r.dcossin.data()};
  const kernels::RotaryAnglesGrads<T> ag{r.cossin.data(), r.dcossin.data(), r.dangle.data(), r.ddt.data()};
  if (kernels == Kernels::cpu) {
    namespace ssm = megacpp::cpu::ssm;
    ssm::rotary_angles_forward<T>(pa.batch, pa.seq, pa.heads, pa.n_angles, pr.doc_ids.data(), aa.angle, aa.dt, aa.cossin);
    ssm::rotary_qk_forward<T>(pq.batch, pq.seq, pq.heads, pq.rank, pq.d_state, pq.n_angles, qa.x, qa.bias, qa.cossin, qa.y);
    ssm::rotary_qk_backward<T>(pq.batch, pq.seq, pq.heads, pq.rank, pq.d_state, pq.n_angles, qa.x, qa.bias, qa.cossin,
                               qg.dy, qg.x, qg.bias, qg.cossin);
    ssm::rotary_angles_backward<T>(pa.batch, pa.seq, pa.heads, pa.n_angles, pr.doc_ids.data(), aa.angle, aa.dt,
                                   ag.cossin, ag.dcossin, ag.angle, ag.dt);
  } else {
    emulated_rotary_angles_forward<T>(pa, pr.doc_ids.data(), aa);
    emulated_rotary_qk_forward<T>(pq, qa);
    emulated_rotary_qk_backward<T>(pq, qa, qg);
    emulated_rotary_angles_backward<T>(pa, pr.doc_ids.data(), aa, ag);
  }
  return r;
}

template <class T>
void check_against_cpu() {
  for (const RotaryCase& c : rotary_cases()) {
    INFO(c.name);
    const Problem<T> pr(c);
    const Run<T> got = run(pr, Kernels::emulated), want = run(pr, Kernels::cpu);
    const double tolerance = std::is_same_v<T, float> ? c.float_tolerance : 1e-11;
    const auto check = [&](const char* what, const std::vector<T>& g, const std::vector<T>& w) {
      const double error = scaled_error(g, w);
      std::printf("  rotary %s %-8s error %.2e  (%s)\n", std::is_same_v<T, float> ? "float " : "double", what, error,
                  c.name);
      INFO(what << ": error " << error << " against " << tolerance);
      CHECK(error <= tolerance);
    };
    check("cossin", got.cossin, want.cossin);
    check("y", got.y, want.y);
    check("dx", got.dx, want.dx);
    check("dbias", got.dbias, want.dbias);
    check("dcossin", got.dcossin, want.dcossin);
    check("dangle", got.dangle, want.dangle);
    check("ddt", got.ddt, want.ddt);
  }
}

}  // namespace

TEST_CASE("rotary: CUDA angles and rotation, forward and backward, on the emulator match the CPU kernels, float",
          "[rotary]") {
  check_against_cpu<float>();
}

TEST_CASE("rotary: CUDA angles and rotation, forward and backward, on the emulator match the CPU kernels, double",
          "[rotary]") {
  check_against_cpu<double>();
}

TEST_CASE("rotary: the same bits run to run and under reversed and greedy schedules", "[rotary]") {
  for (const RotaryCase& c : rotary_cases()) {
    INFO(c.name);
    const Problem<float> pr(c);
    check_same_bits_under_schedules([&] { return run(pr, Kernels::emulated).outputs(); });
  }
}

TEST_CASE("rotary: theta and its gradient do not cross a document start (bitwise)", "[rotary]") {
  // Row 0 of the first case: documents [0, 70), [70, 71), [71, 135), [135, 200), runs of 32.
  // Changing the first document's angles and dt leaves every later token's cossin and y as they
  // were; changing dy after token 70 leaves the first document's dangle and ddt as they were.
  const RotaryCase& c = rotary_cases().front();
  const Problem<float> pr(c);
  const Run<float> base = run(pr, Kernels::emulated);
  const kernels::RotaryAnglesParams& p = pr.angles;
  constexpr index_t kFirstEnd = 70;
  Problem<float> earlier = pr;
  for (index_t t = 0; t < kFirstEnd; ++t) {
    for (index_t s = 0; s < p.n_angles; ++s) earlier.angle[static_cast<std::size_t>(t * p.n_angles + s)] *= -0.5f;
    for (index_t h = 0; h < p.heads; ++h) earlier.dt[static_cast<std::size_t>(t * p.heads + h)] += 0.3f;
  }
  const Run<float> changed_before = run(earlier, Kernels::emulated);
  const auto per_token = [&](const std::vector<float>& v) { return v.size() / static_cast<std::size_t>(p.batch * p.seq); };
  for (std::size_t e = static_cast<std::size_t>(kFirstEnd) * per_token(base.cossin); e < base.cossin.size(); ++e) {
    INFO("cossin element " << e);
    REQUIRE(changed_before.cossin[e] == base.cossin[e]);
  }
  for (std::size_t e = static_cast<std::size_t>(kFirstEnd) * per_token(base.y); e < base.y.size(); ++e) {
    INFO("y element " << e);
    REQUIRE(changed_before.y[e] == base.y[e]);
  }
  CHECK(changed_before.cossin[0] != base.cossin[0]);  // the change reached the first document

  Problem<float> later = pr;
  for (std::size_t e = static_cast<std::size_t>(kFirstEnd) * per_token(pr.dy); e < pr.dy.size(); ++e) later.dy[e] *= 2.0f;
  const Run<float> changed_after = run(later, Kernels::emulated);
  for (std::size_t e = 0; e < static_cast<std::size_t>(kFirstEnd) * per_token(base.dangle); ++e) {
    INFO("dangle element " << e);
    REQUIRE(changed_after.dangle[e] == base.dangle[e]);
  }
  for (std::size_t e = 0; e < static_cast<std::size_t>(kFirstEnd) * per_token(base.ddt); ++e) {
    INFO("ddt element " << e);
    REQUIRE(changed_after.ddt[e] == base.ddt[e]);
  }
  CHECK(changed_after.dangle.back() != base.dangle.back());  // the change reached the later documents
}

}  // namespace megacpp::cuda_emulation
