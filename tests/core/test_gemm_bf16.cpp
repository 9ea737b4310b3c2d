// The bf16 GEMM (Cpu::gemm_bf16: bf16 operands, fp32 sums, fp32 C) on both CPU paths, the
// VDPBF16PS kernel (backends/cpu/detail/gemm_bf16_kernel.hpp, where the CPU has AVX512-BF16) and
// the fp32 fallback, against a naive reference on the same bf16 values:
// - small-integer operands, where every product and partial sum is exact in fp32, so any order
//   of summation gives the reference's bits: equality catches a lost, doubled or misplaced term;
// - normal operands, within the bound of fp32 summation (the only error the contract allows);
// and the property the fp32 GEMM guarantees: a row of C depends only on its row of op(A), bitwise,
// whatever the row count, the rows beside it and the thread count.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "megacpp/megacpp.hpp"
#include "support/gemm_testing.hpp"

using namespace megacpp;
using megacpp::testing::a_size, megacpp::testing::b_size, megacpp::testing::c_size, megacpp::testing::make_args,
    megacpp::testing::require_rows_independent;
using cpu::Bf16GemmPath;

namespace {

// The paths this CPU can run: the fallback always, the VDPBF16PS kernel where the CPU has it.
std::vector<Bf16GemmPath> runnable_paths() {
  std::vector<Bf16GemmPath> paths{Bf16GemmPath::fp32_fallback};
  if (cpu::cpu_has_avx512_bf16()) paths.push_back(Bf16GemmPath::avx512_bf16);
  else WARN("this CPU has no AVX512-BF16: only the fp32 fallback of gemm_bf16 is tested");
  return paths;
}

// The depth block of the VDPBF16PS kernel (its sums restart every kKc), for shapes that cross it.
#if MEGACPP_HAS_AVX512_BF16_KERNEL
constexpr index_t kDepthBlock = cpu::bf16_gemm::Tiling::kKc;
#else
constexpr index_t kDepthBlock = 1024;
#endif

struct Result {
  std::vector<double> value;  // alpha op(A) op(B) + beta C in long double, rounded to double
  std::vector<double> bound;  // (k + 3) u (|alpha| sum |terms| + |beta C|): fp32 summation error bound
};

// Naive reference over the whole batch on the bf16 values (converted exactly to float).
Result reference(const GemmArgs& g, float alpha, const std::vector<bf16>& A, const std::vector<bf16>& B, float beta,
                 const std::vector<float>& C) {
  Result r{std::vector<double>(C.begin(), C.end()), std::vector<double>(C.size(), 0.0)};
  // Products of two bf16 are exact in fp32 (8-bit significands); each of the k - 1 adds of the
  // dot product, the scaling by alpha and the two steps of adding beta C round once, so with
  // u = 2^-24 the error is at most gamma_(k+3) (|alpha| sum |terms| + |beta C|) (Higham,
  // "Accuracy and Stability of Numerical Algorithms", 2nd ed., eq. 3.5), whatever the order.
  constexpr double u = 0x1.0p-24;
  const double gamma = static_cast<double>(g.k + 3) * u / (1.0 - static_cast<double>(g.k + 3) * u);
  for (index_t b = 0; b < g.batch; ++b)
    for (index_t i = 0; i < g.m; ++i)
      for (index_t j = 0; j < g.n; ++j) {
        long double acc = 0, abs_acc = 0;
        for (index_t p = 0; p < g.k; ++p) {
          const float x = g.trans_a ? A[b * g.stride_a + p * g.lda + i] : A[b * g.stride_a + i * g.lda + p];
          const float y = g.trans_b ? B[b * g.stride_b + j * g.ldb + p] : B[b * g.stride_b + p * g.ldb + j];
          acc += static_cast<long double>(x) * y;
          abs_acc += std::fabs(static_cast<long double>(x) * y);
        }
        const std::size_t at = static_cast<std::size_t>(b * g.stride_c + i * g.ldc + j);
        const long double c = beta == 0.0f ? 0.0L : static_cast<long double>(beta) * C[at];
        r.value[at] = static_cast<double>(alpha * acc + c);
        r.bound[at] = gamma * static_cast<double>(std::fabs(alpha) * abs_acc + std::fabs(c));
      }
  return r;
}

// Operands: N(0, 1) rounded to bf16, or integers in [-8, 8] (exact in bf16; with k <= 2^17 every
// partial sum is an integer below 2^24, exact in fp32).
std::vector<bf16> operand(std::size_t n, std::uint64_t seed, bool integers) {
  Rng rng(seed);
  std::vector<bf16> v(n);
  for (auto& x : v) x = bf16(integers ? static_cast<float>(static_cast<int>(rng.below(17)) - 8) : static_cast<float>(rng.normal()));
  return v;
}
std::vector<float> fp32_values(std::size_t n, std::uint64_t seed, bool integers) {
  std::vector<float> v(n);
  const auto b = operand(n, seed, integers);
  for (std::size_t i = 0; i < n; ++i) v[i] = b[i];
  return v;
}


// Runs one product on every runnable path and compares it with the reference: bitwise for
// integer operands (alpha and beta powers of two keep them exact), within the summation bound
// otherwise. Padding columns of C (j >= n) must keep their bits.
void check_product(const GemmArgs& g, float alpha, float beta, bool integers) {
  const auto A = operand(a_size(g), 11 + static_cast<std::uint64_t>(g.k), integers);
  const auto B = operand(b_size(g), 12 + static_cast<std::uint64_t>(g.n), integers);
  const auto C0 = fp32_values(c_size(g), 13, integers);
  const Result ref = reference(g, alpha, A, B, beta, C0);
  for (const Bf16GemmPath path : runnable_paths()) {
    INFO("path " << cpu::bf16_gemm_path_name(path) << " m " << g.m << " n " << g.n << " k " << g.k << " ta "
                 << g.trans_a << " tb " << g.trans_b << " lda " << g.lda << " ldb " << g.ldb << " ldc " << g.ldc
                 << " alpha " << alpha << " beta " << beta << (integers ? " integers" : " normal"));
    auto C = C0;
    cpu::gemm_bf16(g, alpha, A.data(), B.data(), beta, C.data(), path);
    for (index_t i = 0; i < g.m; ++i)
      for (index_t j = 0; j < g.ldc; ++j) {
        const std::size_t at = static_cast<std::size_t>(i * g.ldc + j);
        if (j >= g.n) {
          REQUIRE(std::memcmp(&C[at], &C0[at], sizeof(float)) == 0);
        } else if (integers) {
          REQUIRE(static_cast<double>(C[at]) == ref.value[at]);
        } else {
          REQUIRE(std::fabs(static_cast<double>(C[at]) - ref.value[at]) <= ref.bound[at]);
        }
      }
  }
}

}  // namespace

TEST_CASE("gemm_bf16 equals the reference on bf16 values: every transpose, tile/block tail and depth block",
          "[kernels][gemm][gemm_bf16]") {
  // m around the 6-row tile and the 48-row block; n around the 16-lane vector and the 64-column
  // tile; k odd and even around one and two depth blocks (the k-pairs' zero high half) and the
  // 16-pair steps of the B^T packing; padded leading dimensions; all four transposes.
  const index_t kc = kDepthBlock;
  for (index_t m : {1, 7, 50, 97})
    for (index_t n : {1, 17, 33, 65, 130})
      for (index_t k : {index_t{1}, index_t{2}, index_t{33}, index_t{64}, kc - 1, kc, kc + 1, 2 * kc + 77})
        for (bool ta : {false, true})
          for (bool tb : {false, true}) {
            const index_t pad = (m + n + k) % 3;
            check_product(make_args(m, n, k, ta, tb, pad), 1.0f, 1.0f, true);
            if ((m + n) % 2 == 0) check_product(make_args(m, n, k, ta, tb, pad), 1.0f, 0.0f, false);
          }
}

TEST_CASE("gemm_bf16: alpha, beta, wide C split by columns, and products split across threads",
          "[kernels][gemm][gemm_bf16]") {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      // n past the packed B block (2048 columns) on each of two threads' column halves; k past
      // two depth blocks
      check_product(make_args(13, 4200, 2 * kDepthBlock + 19, ta, tb, 1), 1.0f, 1.0f, true);
      // alpha and beta powers of two (exact) on integers, and any alpha, beta on normal values,
      // on a product split by rows across threads
      check_product(make_args(301, 257, 300, ta, tb, 3), 0.5f, -2.0f, true);
      check_product(make_args(301, 257, 300, ta, tb, 2), 1.5f, 0.5f, false);
      check_product(make_args(150, 2100, 70, ta, tb, 0), -0.75f, 2.0f, false);
      // more rows per thread than a transposed A's packed block (kMcTransposed: 480), with a
      // partial block and a partial 6-row panel after it
      check_product(make_args(2 * cpu::bf16_gemm::Tiling::kMcTransposed + 140, 70, 301, ta, tb, 2), 1.0f, 0.0f, true);
    }
}

TEST_CASE("gemm_bf16: batch strides (shared B), beta 0 over NaN, k 0 gives beta C", "[kernels][gemm][gemm_bf16]") {
  for (const Bf16GemmPath path : runnable_paths()) {
    INFO("path " << cpu::bf16_gemm_path_name(path));
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (index_t stride_b_factor : {0, 1}) {
          INFO("ta " << ta << " tb " << tb << " stride_b_factor " << stride_b_factor);
          const index_t m = 9, n = 21, k = 37, batch = 4;
          GemmArgs g = GemmArgs::dense(ta, tb, m, n, k);
          g.stride_a = m * k;
          g.stride_b = stride_b_factor * k * n;
          g.stride_c = m * n;
          g.batch = batch;
          const auto A = operand(static_cast<std::size_t>(batch * m * k), 21, true);
          const auto B = operand(static_cast<std::size_t>(batch * k * n), 22, true);
          const auto C0 = fp32_values(static_cast<std::size_t>(batch * m * n), 23, true);
          const Result ref = reference(g, 2.0f, A, B, 0.5f, C0);
          auto C = C0;
          cpu::gemm_bf16(g, 2.0f, A.data(), B.data(), 0.5f, C.data(), path);
          for (std::size_t i = 0; i < C.size(); ++i) REQUIRE(static_cast<double>(C[i]) == ref.value[i]);
        }
    const GemmArgs g = make_args(13, 70, 300, false, true, 0);
    const auto A = operand(a_size(g), 4, false), B = operand(b_size(g), 5, false);
    std::vector<float> C(c_size(g), std::numeric_limits<float>::quiet_NaN());
    cpu::gemm_bf16(g, 1.0f, A.data(), B.data(), 0.0f, C.data(), path);
    for (float c : C) REQUIRE(std::isfinite(c));

    const GemmArgs empty = make_args(3, 4, 0, false, false, 0);
    std::vector<float> c2{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    cpu::gemm_bf16(empty, 1.0f, nullptr, nullptr, 0.5f, c2.data(), path);
    CHECK(c2[11] == 6.0f);
    c2[0] = std::numeric_limits<float>::quiet_NaN();
    cpu::gemm_bf16(empty, 1.0f, nullptr, nullptr, 0.0f, c2.data(), path);
    CHECK(c2[0] == 0.0f);
    CHECK(c2[11] == 0.0f);
  }
}

TEST_CASE("gemm_bf16: a row of C depends only on its row of op(A), bitwise (row count, neighbours, threads)",
          "[kernels][gemm][gemm_bf16][determinism]") {
  // As for the fp32 GEMM (test_gemm.cpp): all rows, a sub-range starting at an odd row and single
  // rows, on 1 and 2 threads, give the same bits, on each path. k crosses two depth blocks.
  const index_t m = 203, n = 300, k = 2 * kDepthBlock + 18;
  for (const Bf16GemmPath path : runnable_paths())
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        INFO("path " << cpu::bf16_gemm_path_name(path) << " ta " << ta << " tb " << tb);
        const GemmArgs g = make_args(m, n, k, ta, tb, 0);
        const auto A = operand(a_size(g), 6, false), B = operand(b_size(g), 7, false);
        require_rows_independent(g, [&](const GemmArgs& part, index_t a_offset, float* c) {
          cpu::gemm_bf16(part, 1.0f, A.data() + a_offset, B.data(), 0.0f, c, path);
        });
      }
}

TEST_CASE("gemm_bf16: the path is chosen from the CPU and MEGACPP_BF16_GEMM, and Cpu::gemm_bf16 runs it",
          "[kernels][gemm][gemm_bf16]") {
  using cpu::choose_bf16_gemm_path;
  CHECK(choose_bf16_gemm_path(true, nullptr) == Bf16GemmPath::avx512_bf16);
  CHECK(choose_bf16_gemm_path(true, "auto") == Bf16GemmPath::avx512_bf16);
  CHECK(choose_bf16_gemm_path(false, nullptr) == Bf16GemmPath::fp32_fallback);
  CHECK(choose_bf16_gemm_path(false, "") == Bf16GemmPath::fp32_fallback);
  CHECK(choose_bf16_gemm_path(true, "fp32") == Bf16GemmPath::fp32_fallback);
  CHECK(choose_bf16_gemm_path(true, "avx512bf16") == Bf16GemmPath::avx512_bf16);
  CHECK_THROWS_WITH(choose_bf16_gemm_path(false, "avx512bf16"), Catch::Contains("no AVX512-BF16"));
  CHECK_THROWS_WITH(choose_bf16_gemm_path(true, "amx"), Catch::Contains("MEGACPP_BF16_GEMM is 'amx'"));

  // This process's path follows its environment (CTest also runs this binary's gemm_bf16 tests
  // with MEGACPP_BF16_GEMM=fp32), and Cpu::gemm_bf16 gives that path's bits.
  const char* setting = std::getenv("MEGACPP_BF16_GEMM");
  const Bf16GemmPath expected = choose_bf16_gemm_path(cpu::cpu_has_avx512_bf16(), setting);
  CHECK(cpu::bf16_gemm_path() == expected);
  if (setting && std::string(setting) == "fp32") CHECK(cpu::bf16_gemm_path() == Bf16GemmPath::fp32_fallback);
  const GemmArgs g = make_args(40, 90, 1100, false, true, 0);
  const auto A = operand(a_size(g), 31, false), B = operand(b_size(g), 32, false);
  std::vector<float> via_backend(c_size(g)), via_path(c_size(g));
  Cpu::gemm_bf16(g, 1.0f, A.data(), B.data(), 0.0f, via_backend.data());
  cpu::gemm_bf16(g, 1.0f, A.data(), B.data(), 0.0f, via_path.data(), expected);
  CHECK(std::memcmp(via_backend.data(), via_path.data(), via_path.size() * sizeof(float)) == 0);
}
