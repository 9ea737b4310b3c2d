// The CPU GEMM (backends/cpu/detail/gemm_kernel.hpp): values against a naive double reference
// across every tile, block and tail boundary, and the property the masking invariants rely on:
// a row of C depends only on its row of op(A) and on op(B), bitwise, whatever the row count,
// the rows beside it and the thread count.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "megacpp/megacpp.hpp"
#include "support/gemm_testing.hpp"

using namespace megacpp;
using megacpp::testing::a_size, megacpp::testing::b_size, megacpp::testing::c_size, megacpp::testing::make_args,
    megacpp::testing::require_rows_independent;

namespace {

// Naive reference: C_b = alpha op(A_b) op(B_b) + beta C_b for every product of the batch, in
// long double.
template <class T>
std::vector<T> reference(const GemmArgs& g, T alpha, const std::vector<T>& A, const std::vector<T>& B, T beta,
                         std::vector<T> C) {
  for (index_t b = 0; b < g.batch; ++b)
    for (index_t i = 0; i < g.m; ++i)
      for (index_t j = 0; j < g.n; ++j) {
        long double acc = 0;
        for (index_t p = 0; p < g.k; ++p) {
          const long double x = g.trans_a ? A[b * g.stride_a + p * g.lda + i] : A[b * g.stride_a + i * g.lda + p];
          const long double y = g.trans_b ? B[b * g.stride_b + j * g.ldb + p] : B[b * g.stride_b + p * g.ldb + j];
          acc += x * y;
        }
        T& c = C[b * g.stride_c + i * g.ldc + j];
        c = static_cast<T>(alpha * acc + (beta == T(0) ? 0.0L : beta * static_cast<long double>(c)));
      }
  return C;
}

template <class T>
std::vector<T> random_values(std::size_t n, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(rng.normal());
  return v;
}


template <class T>
void check_against_reference(index_t m, index_t n, index_t k, bool ta, bool tb, index_t pad, T alpha, T beta, double tol) {
  const GemmArgs g = make_args(m, n, k, ta, tb, pad);
  const auto A = random_values<T>(a_size(g), 1), B = random_values<T>(b_size(g), 2);
  auto C = random_values<T>(c_size(g), 3);
  const auto expected = reference<T>(g, alpha, A, B, beta, C);
  Cpu::gemm<T>(g, alpha, A.data(), B.data(), beta, C.data());
  INFO("m " << m << " n " << n << " k " << k << " ta " << ta << " tb " << tb << " pad " << pad << " alpha "
            << alpha << " beta " << beta);
  double worst = 0;
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < g.ldc; ++j) {
      const std::size_t at = static_cast<std::size_t>(i * g.ldc + j);
      if (j >= n) {  // padding columns are never written
        REQUIRE(std::memcmp(&C[at], &expected[at], sizeof(T)) == 0);
        continue;
      }
      const double scale = std::sqrt(static_cast<double>(k)) + std::abs(static_cast<double>(expected[at]));
      worst = std::max(worst, std::abs(static_cast<double>(C[at]) - static_cast<double>(expected[at])) / scale);
    }
  CHECK(worst < tol);
}

}  // namespace

TEST_CASE("Cpu::gemm equals a naive reference across tile, block and tail boundaries", "[kernels][gemm]") {
  // m around the 6-row tile and the 96-row block; n around the 64- (fp32) / 32-column (fp64)
  // tile; k around one and two 256-deep blocks; transposes; padded leading dimensions.
  for (index_t m : {1, 5, 6, 7, 97, 200})
    for (index_t n : {1, 31, 33, 64, 65, 130})
      for (index_t k : {1, 17, 256, 257, 512, 513, 600})
        for (bool ta : {false, true})
          for (bool tb : {false, true}) {
            check_against_reference<double>(m, n, k, ta, tb, (m + n + k) % 3, 1.0, 0.0, 1e-14);
            check_against_reference<float>(m, n, k, ta, tb, (m + n) % 2, 1.0f, 1.0f, 1e-5);
          }
  // n past the packed B block (2048 fp32 / 1024 fp64 columns) on each of two threads' column
  // halves, k past two depth blocks
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      check_against_reference<double>(7, 4200, 530, ta, tb, 1, 1.0, 0.0, 1e-14);
      check_against_reference<float>(13, 4200, 530, ta, tb, 0, 1.0f, 1.0f, 1e-5);
    }
  // alpha and beta other than 0 and 1, on a product large enough to be split across threads
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      check_against_reference<double>(301, 257, 300, ta, tb, 3, 1.5, 0.5, 1e-14);
      check_against_reference<float>(150, 2100, 70, ta, tb, 0, -0.75f, 2.0f, 1e-5);
    }
}

TEST_CASE("Cpu::gemm with beta 0 never reads C (NaN there does not reach the result); k 0 gives beta C",
          "[kernels][gemm]") {
  const GemmArgs g = make_args(13, 70, 300, false, true, 0);
  const auto A = random_values<float>(a_size(g), 4), B = random_values<float>(b_size(g), 5);
  std::vector<float> C(c_size(g), std::numeric_limits<float>::quiet_NaN());
  Cpu::gemm<float>(g, 1.0f, A.data(), B.data(), 0.0f, C.data());
  for (float c : C) REQUIRE(std::isfinite(c));

  GemmArgs empty = make_args(3, 4, 0, false, false, 0);
  std::vector<double> c2{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  Cpu::gemm<double>(empty, 1.0, nullptr, nullptr, 0.5, c2.data());
  CHECK(c2[11] == 6.0);
  Cpu::gemm<double>(empty, 1.0, nullptr, nullptr, 0.0, c2.data());
  CHECK(c2[11] == 0.0);
}

TEST_CASE("Cpu::gemm: a row of C depends only on its row of op(A), bitwise (row count, neighbours, threads)",
          "[kernels][gemm][determinism]") {
  // The whole-layer masking invariant needs this of every projection (require_rows_independent:
  // all rows, a sub-range starting at an odd row and single rows, on 1 and 2 threads).
  const index_t m = 203, n = 300, k = 530;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      INFO("ta " << ta << " tb " << tb);
      const GemmArgs g = make_args(m, n, k, ta, tb, 0);
      const auto A = random_values<float>(a_size(g), 6), B = random_values<float>(b_size(g), 7);
      require_rows_independent(g, [&](const GemmArgs& part, index_t a_offset, float* c) {
        Cpu::gemm<float>(part, 1.0f, A.data() + a_offset, B.data(), 0.0f, c);
      });
    }
}

TEST_CASE("Cpu::gemm agrees with Eigen's product (the reference it replaced)", "[kernels][gemm]") {
  const GemmArgs g = make_args(517, 389, 700, false, true, 0);
  const auto A = random_values<float>(a_size(g), 8), B = random_values<float>(b_size(g), 9);
  std::vector<float> C(c_size(g)), C_eigen(c_size(g));
  Cpu::gemm<float>(g, 1.0f, A.data(), B.data(), 0.0f, C.data());
  cpu::eigen_gemm<float>(g, 1.0f, A.data(), B.data(), 0.0f, C_eigen.data());
  double worst = 0;
  for (std::size_t i = 0; i < C.size(); ++i) worst = std::max(worst, static_cast<double>(std::abs(C[i] - C_eigen[i])));
  CHECK(worst < 1e-4);  // sums of 700 products of N(0, 1) values: |C| ~ 26, fp32 rounding ~ 1e-5
}

TEST_CASE("Cpu::gemm equals the naive product for every transpose, batch stride and beta", "[kernels]") {
  // Small products (one per thread over the batch) and one large enough to be split across
  // threads by rows (m >= n) and by columns (n > m).
  struct Size { index_t m, n, k, batch; };
  for (const Size size : {Size{7, 5, 9, 3}, Size{301, 257, 200, 1}, Size{150, 333, 96, 1}})
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (index_t stride_b_factor : {0, 1})
        for (double beta : {0.0, 1.0, 0.5}) {
          if (size.batch == 1 && (stride_b_factor == 0 || beta == 0.5)) continue;  // batch-only variations
          const index_t m = size.m, n = size.n, k = size.k, batch = size.batch;
          GemmArgs g = GemmArgs::dense(ta, tb, m, n, k);
          g.stride_a = m * k;
          g.stride_b = stride_b_factor * k * n;
          g.stride_c = m * n;
          g.batch = batch;
          const auto A = random_values<double>(static_cast<std::size_t>(batch * m * k), 1);
          const auto Bm = random_values<double>(static_cast<std::size_t>(batch * k * n), 2);
          auto C = random_values<double>(static_cast<std::size_t>(batch * m * n), 3);
          const auto C_ref = reference<double>(g, 1.5, A, Bm, beta, C);
          Cpu::gemm<double>(g, 1.5, A.data(), Bm.data(), beta, C.data());
          for (std::size_t i = 0; i < C.size(); ++i) REQUIRE(C[i] == Approx(C_ref[i]).epsilon(1e-11).margin(1e-11));
        }
}
