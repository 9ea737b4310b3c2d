// Newton-Schulz orthogonalisation: singular values land in the expected band, the GEMM path
// matches the naive double reference (modded-nanogpt's zeropower_via_newtonschulz5, line by line), both orientations.
#include <cmath>
#include <vector>

#include "optim_testing.hpp"

using namespace megacpp;
using namespace megacpp::testing;
using optim::NS5;
using optim::PolarExpress;

namespace {

// Runs newton_schulz<P> on host values through the Cpu backend in element type T.
template <class P, class T>
std::vector<double> run_ns(const std::vector<double>& g, index_t rows, index_t cols, int steps = P::default_steps) {
  std::vector<T> gt(g.begin(), g.end());
  const auto input = Tensor<T, Cpu>::from_host({rows, cols}, gt);
  Tensor<T, Cpu> out({rows, cols});
  optim::NsWorkspace<T, Cpu> ws(rows, cols);
  optim::newton_schulz<P>(input.data(), out.data(), ws, steps);
  const std::vector<T> host = out.to_host();
  return std::vector<double>(host.begin(), host.end());
}

std::vector<double> gaussian(index_t n, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (double& x : v) x = rng.normal();
  return v;
}

// Singular values geometric from 1 down to 1 / condition.
std::vector<double> geometric_spectrum(index_t k, double condition) {
  std::vector<double> s(static_cast<std::size_t>(k));
  for (index_t i = 0; i < k; ++i) s[static_cast<std::size_t>(i)] = std::pow(condition, -static_cast<double>(i) / static_cast<double>(k - 1));
  return s;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst;
}

std::vector<double> transposed(const std::vector<double>& m, index_t rows, index_t cols) {
  std::vector<double> t(m.size());
  for (index_t i = 0; i < rows; ++i)
    for (index_t j = 0; j < cols; ++j) t[static_cast<std::size_t>(j * rows + i)] = m[static_cast<std::size_t>(i * cols + j)];
  return t;
}

struct Case {
  const char* what;
  index_t rows, cols;
  std::vector<double> g;
};

std::vector<Case> band_cases() {
  std::vector<Case> cases;
  cases.push_back({"random tall (96, 48)", 96, 48, gaussian(96 * 48, 1)});
  cases.push_back({"random wide (48, 96)", 48, 96, gaussian(48 * 96, 2)});
  cases.push_back({"ill-conditioned tall (80, 40), cond 1e2", 80, 40, matrix_with_spectrum(80, 40, geometric_spectrum(40, 1e2), 3)});
  cases.push_back({"ill-conditioned wide (40, 80), cond 1e2", 40, 80, matrix_with_spectrum(40, 80, geometric_spectrum(40, 1e2), 4)});
  cases.push_back({"ill-conditioned tall (80, 40), cond 3e2", 80, 40, matrix_with_spectrum(80, 40, geometric_spectrum(40, 3e2), 6)});
  cases.push_back({"ill-conditioned wide (40, 80), cond 3e2", 40, 80, matrix_with_spectrum(40, 80, geometric_spectrum(40, 3e2), 7)});
  return cases;
}

}  // namespace

TEST_CASE("NS5 singular values land in [0.5, 1.5]: random and ill-conditioned, both orientations", "[optim][newton_schulz]") {
  for (const Case& c : band_cases()) {
    const std::vector<double> o = run_ns<NS5, float>(c.g, c.rows, c.cols);
    const std::vector<double> s = singular_values(o, c.rows, c.cols);
    INFO(c.what << ": singular values in [" << s.back() << ", " << s.front() << "]");
    CHECK(s.front() <= 1.5);
    CHECK(s.back() >= 0.5);
  }
}

TEST_CASE("Polar Express singular values land closer to 1 than NS5's", "[optim][newton_schulz]") {
  for (const Case& c : band_cases()) {
    const std::vector<double> s5 = singular_values(run_ns<NS5, float>(c.g, c.rows, c.cols), c.rows, c.cols);
    const std::vector<double> pe = singular_values(run_ns<PolarExpress, float>(c.g, c.rows, c.cols), c.rows, c.cols);
    INFO(c.what << ": NS5 [" << s5.back() << ", " << s5.front() << "], Polar Express [" << pe.back() << ", " << pe.front() << "]");
    CHECK(pe.front() <= 1.2);
    CHECK(pe.back() >= 0.7);
    CHECK(pe.front() - pe.back() < s5.front() - s5.back());
  }
}

TEST_CASE("NS5 past its range (cond 1e4): nothing exceeds 1.5, the smallest directions grow by about a^5", "[optim][newton_schulz]") {
  // 5 steps multiply a tiny singular value by at most a^5 = 3.4445^5 ~ 487: after the Frobenius
  // normalisation, directions below ~1e-3 of ||G||_F cannot reach 0.5. This pins that limit.
  const std::vector<double> sigma = geometric_spectrum(40, 1e4);
  double frobenius = 0;
  for (double s : sigma) frobenius += s * s;
  frobenius = std::sqrt(frobenius);
  for (const auto& [rows, cols] : std::vector<std::pair<index_t, index_t>>{{80, 40}, {40, 80}}) {
    const auto g = matrix_with_spectrum(rows, cols, sigma, 8);
    const std::vector<double> s = singular_values(run_ns<NS5, float>(g, rows, cols), rows, cols);
    const double lifted = s.back() / (sigma.back() / frobenius);
    INFO("(" << rows << ", " << cols << "): singular values in [" << s.back() << ", " << s.front() << "], smallest grew x" << lifted);
    CHECK(s.front() <= 1.5);
    CHECK(lifted > 0.9 * std::pow(3.4445, 5));
    CHECK(lifted < 1.001 * std::pow(3.4445, 5));
  }
}

TEST_CASE("NS preserves the null space: a rank-deficient input keeps zero singular values", "[optim][newton_schulz]") {
  std::vector<double> sigma = geometric_spectrum(24, 10.0);
  for (std::size_t i = 16; i < sigma.size(); ++i) sigma[i] = 0.0;  // rank 16 of 24
  const auto g = matrix_with_spectrum(48, 24, sigma, 5);
  const std::vector<double> s = singular_values(run_ns<NS5, double>(g, 48, 24), 48, 24);
  CHECK(s[15] >= 0.5);
  CHECK(s[16] < 1e-10);
}

TEST_CASE("newton_schulz matches the naive double reference (modded-nanogpt's Python, line by line)", "[optim][newton_schulz]") {
  for (const auto& [rows, cols] : std::vector<std::pair<index_t, index_t>>{{24, 40}, {40, 24}, {32, 32}, {1, 7}, {7, 1}}) {
    const auto g = gaussian(rows * cols, 10 + static_cast<std::uint64_t>(rows));
    INFO("G (" << rows << ", " << cols << ")");
    const auto ref5 = optim::newton_schulz_reference<NS5>(g, rows, cols, 5);
    const auto refpe = optim::newton_schulz_reference<PolarExpress>(g, rows, cols, 5);
    // double: the GEMM formulation (a I + b A + c A^2) X agrees with a X + (b A + c A A) X to rounding
    CHECK(max_abs_diff(run_ns<NS5, double>(g, rows, cols), ref5) < 1e-12);
    CHECK(max_abs_diff(run_ns<PolarExpress, double>(g, rows, cols), refpe) < 1e-12);
    // fp32 (the CPU's NS precision) against the double reference
    CHECK(max_abs_diff(run_ns<NS5, float>(g, rows, cols), ref5) < 2e-5);
    CHECK(max_abs_diff(run_ns<PolarExpress, float>(g, rows, cols), refpe) < 2e-5);
  }
}

TEST_CASE("NS of G^T is NS(G)^T: the tall path is the transpose of the wide one", "[optim][newton_schulz]") {
  const index_t rows = 56, cols = 24;
  const auto g = gaussian(rows * cols, 21);
  const auto tall = run_ns<NS5, double>(g, rows, cols);
  const auto wide = run_ns<NS5, double>(transposed(g, rows, cols), cols, rows);
  CHECK(max_abs_diff(tall, transposed(wide, cols, rows)) < 1e-13);
}

TEST_CASE("NS of a zero matrix is zero, and 0 steps is the normalised input", "[optim][newton_schulz]") {
  const std::vector<double> zeros(12, 0.0);
  for (double v : run_ns<NS5, float>(zeros, 3, 4)) CHECK(v == 0.0);
  // 0 steps: X = G / (||G||_F + 1e-7) with ||G||_F = 5 for G = (3, 4)
  const auto x = run_ns<NS5, double>({3.0, 4.0}, 1, 2, 0);
  CHECK(x[0] == Approx(3.0 / (5.0 + 1e-7)).epsilon(1e-15));
  CHECK(x[1] == Approx(4.0 / (5.0 + 1e-7)).epsilon(1e-15));
}

TEST_CASE("NS on a scaled orthogonal matrix follows the scalar quintic exactly", "[optim][newton_schulz]") {
  // G = 2 Q with Q orthogonal: every singular value is 2, so O = f^5(sigma_0) Q with
  // sigma_0 = 2 / (2 sqrt(2) + 1e-7) and f(s) = a s + b s^3 + c s^5.
  const std::vector<double> q{0.6, -0.8, 0.8, 0.6};
  std::vector<double> g(4);
  for (int i = 0; i < 4; ++i) g[static_cast<std::size_t>(i)] = 2 * q[static_cast<std::size_t>(i)];
  double sigma = 2.0 / (2.0 * std::sqrt(2.0) + 1e-7);
  for (int k = 0; k < 5; ++k) sigma = 3.4445 * sigma - 4.7750 * std::pow(sigma, 3) + 2.0315 * std::pow(sigma, 5);
  const auto o = run_ns<NS5, double>(g, 2, 2);
  for (int i = 0; i < 4; ++i) CHECK(o[static_cast<std::size_t>(i)] == Approx(sigma * q[static_cast<std::size_t>(i)]).epsilon(1e-13));
}

TEST_CASE("Newton-Schulz policies and cost model", "[optim][newton_schulz]") {
  STATIC_REQUIRE(optim::NsCoefficients<NS5>);
  STATIC_REQUIRE(optim::NsCoefficients<PolarExpress>);
  CHECK(NS5::at(0).a == 3.4445);
  CHECK(NS5::at(4).c == 2.0315);
  CHECK(PolarExpress::at(0).a == 8.156554524902461);
  CHECK(PolarExpress::at(7).a == PolarExpress::at(4).a);  // past the table: the last entry
  // 2 s^2 (2 L + s) per step
  CHECK(optim::newton_schulz_flops(1024, 4096, 5) == 5.0 * 2.0 * 1024.0 * 1024.0 * (2.0 * 4096.0 + 1024.0));
  CHECK(optim::newton_schulz_flops(4096, 1024, 1) == optim::newton_schulz_flops(1024, 4096, 1));
  CHECK_THROWS_WITH((optim::NsWorkspace<float, Cpu>(0, 3)), Catch::Matchers::Contains("(0, 3)"));
}

namespace {
// Runs newton_schulz_bf16<P> (GEMM operands rounded to bf16, fp32 sums) on host values.
template <class P>
std::vector<double> run_ns_bf16(const std::vector<double>& g, index_t rows, index_t cols, int steps = P::default_steps) {
  std::vector<float> gt(g.begin(), g.end());
  const auto input = Tensor<float, Cpu>::from_host({rows, cols}, gt);
  Tensor<float, Cpu> out({rows, cols});
  optim::NsWorkspace<float, Cpu> ws(rows, cols);
  optim::newton_schulz_bf16<P>(input.data(), out.data(), ws, steps);
  const std::vector<float> host = out.to_host();
  return std::vector<double>(host.begin(), host.end());
}

// ||a - b||_F / ||b||_F
double relative_frobenius(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff += (a[i] - b[i]) * (a[i] - b[i]);
    norm += b[i] * b[i];
  }
  return std::sqrt(diff / norm);
}
}  // namespace

TEST_CASE("newton_schulz_bf16 stays within bf16 rounding of the fp32 iteration, and NS5's band holds", "[optim][newton_schulz]") {
  // Tolerance and the figures it was set from: kNsBf16Tolerance (optim_testing.hpp).
  std::vector<Case> cases = band_cases();
  cases.push_back({"random wide (64, 200)", 64, 200, gaussian(64 * 200, 9)});
  for (const Case& c : cases) {
    const auto ns5 = run_ns_bf16<NS5>(c.g, c.rows, c.cols);
    const auto pe = run_ns_bf16<PolarExpress>(c.g, c.rows, c.cols);
    const double rel_ns5 = relative_frobenius(ns5, run_ns<NS5, float>(c.g, c.rows, c.cols));
    const double rel_pe = relative_frobenius(pe, run_ns<PolarExpress, float>(c.g, c.rows, c.cols));
    const std::vector<double> s = singular_values(ns5, c.rows, c.cols);
    INFO(c.what << ": ||O_bf16 - O_fp32|| / ||O_fp32||: NS5 " << rel_ns5 << ", Polar Express " << rel_pe
                << "; NS5 bf16 singular values in [" << s.back() << ", " << s.front() << "]");
    CHECK(rel_ns5 < kNsBf16Tolerance);
    CHECK(rel_pe < kNsBf16Tolerance);
    CHECK(rel_ns5 > 0.0);  // the bf16 path did run
    CHECK(s.front() <= 1.5);
    CHECK(s.back() >= 0.5);
  }
}
