// tests/cuda_emulation/test_reduce.cpp: the CUDA backend's axis reductions (Cuda::reduce,
// detail/reduce.cuh) on the emulator against the CPU backend's (Cpu::reduce): within rounding in
// float and double, for one-pass shapes and for the shapes whose j is cut into chunks and summed in
// two passes (a bias's gradient over 4,096 rows, uneven chunks, the most chunks, sums of
// everything), with scale and beta, a broadcast operand and NaN in an overwritten output. Also the
// cut itself (it covers j, no chunk is short, one pass when the outputs fill the GPU) and the same
// bits run to run and under other schedules.
#include <catch2/catch.hpp>

#include <cstdio>
#include <limits>
#include <type_traits>
#include <vector>

#include "host_arrays.hpp"
#include "reduce_emulated.hpp"
#include "schedules.hpp"

#include "megacpp/backends/cpu.hpp"

namespace megacpp::cuda_emulation {
namespace {

enum class Sum { product_with_row, squares };  // sum_j x[o, j, i] * w[i], or sum_j x[o, j, i]^2

struct ReduceCase {
  const char* name;
  index_t outer, n, inner;
  Sum sum;
  double scale, beta;  // beta 0: the output starts as NaN, which must be overwritten
  index_t chunks;      // the cut the shape takes (1: one pass)
};

const std::vector<ReduceCase>& reduce_cases() {
  static const std::vector<ReduceCase> all{
      {"one pass, columns: (3, 50, 70), a broadcast row, scale 0.25, beta 1", 3, 50, 70, Sum::product_with_row, 0.25, 1, 1},
      {"one pass, rows: (5, 300, 1), squares, beta 0 over NaN", 5, 300, 1, Sum::squares, 1, 0, 1},
      {"a bias's gradient: (1, 4096, 96), 32 chunks of 128 rows", 1, 4096, 96, Sum::product_with_row, 1, 1, 32},
      {"a norm weight's gradient at width 512: (1, 4096, 512), 32 chunks of 128 rows, 16 column blocks each", 1, 4096,
       512, Sum::product_with_row, 1, 1, 32},
      {"uneven chunks: (2, 1000, 40), 7 chunks of 142 or 143 rows, beta 0 over NaN", 2, 1000, 40,
       Sum::squares, 1, 0, 7},
      {"the most chunks: (1, 20000, 32), 128 chunks of 156 or 157 rows, scale 0.5, beta 0.5", 1, 20000, 32,
       Sum::product_with_row, 0.5, 0.5, 128},
      {"a sum of everything: (1, 100000, 1), 12 chunks, squares, beta 0 over NaN", 1, 100000, 1, Sum::squares, 1, 0, 12},
      {"several sums of rows: (3, 40000, 1), 4 chunks, a broadcast element, scale 1/40000, beta 0.5", 3, 40000, 1,
       Sum::product_with_row, 1.0 / 40000, 0.5, 4},
      {"no rows: (2, 0, 5), beta 0.5", 2, 0, 5, Sum::squares, 1, 0.5, 1},
      {"no rows: (2, 0, 1), beta 0 over NaN", 2, 0, 1, Sum::squares, 1, 0, 1},
  };
  return all;
}

template <class T>
struct Problem {
  std::vector<T> x, w, out;
  explicit Problem(const ReduceCase& c) {
    Rng rng(29);
    const auto count = [](index_t n) { return static_cast<std::size_t>(n); };
    x = uniform<T>(count(c.outer * c.n * c.inner), rng);
    w = uniform<T>(count(c.inner), rng, 0.5, 2.0);
    out = c.beta == 0 ? uninitialized_device<T>(c.outer * c.inner) : uniform<T>(count(c.outer * c.inner), rng);
  }
};

enum class Kernels { cpu, emulated };

template <class T>
std::vector<T> run(const ReduceCase& c, const Problem<T>& pr, Kernels kernels) {
  std::vector<T> out = pr.out;
  const T scale = static_cast<T>(c.scale), beta = static_cast<T>(c.beta);
  const In<T> x{pr.x.data()}, row{pr.w.data(), true};
  if (kernels == Kernels::cpu) {
    if (c.sum == Sum::product_with_row) Cpu::reduce<T>(c.outer, c.n, c.inner, fn::Mul{}, scale, beta, out.data(), x, row);
    else Cpu::reduce<T>(c.outer, c.n, c.inner, fn::Square{}, scale, beta, out.data(), x);
  } else {
    if (c.sum == Sum::product_with_row) emulated_reduce<T>(c.outer, c.n, c.inner, fn::Mul{}, scale, beta, out.data(), x, row);
    else emulated_reduce<T>(c.outer, c.n, c.inner, fn::Square{}, scale, beta, out.data(), x);
  }
  return out;
}

// Both backends sum in double, in different orders. In float the double sums' difference (about
// 1e-12 relative) matters only where it crosses a rounding boundary of float: one unit in the
// last place at most. In double it is the difference itself, which grows with the count of terms.
template <class T>
void check_against_cpu() {
  const double tolerance = std::is_same_v<T, float> ? 2.5e-7 : 1e-13;
  for (const ReduceCase& c : reduce_cases()) {
    INFO(c.name);
    CHECK(reduce_chunks(c.outer, c.n, c.inner) == c.chunks);
    const Problem<T> pr(c);
    const double error = scaled_error(run(c, pr, Kernels::emulated), run(c, pr, Kernels::cpu));
    std::printf("  reduce %s error %.2e  (%s)\n", std::is_same_v<T, float> ? "float " : "double", error, c.name);
    INFO("error " << error << " against " << tolerance);
    CHECK(error <= tolerance);
  }
}

}  // namespace

TEST_CASE("reduce: CUDA reductions on the emulator match the CPU's, float", "[reduce]") { check_against_cpu<float>(); }

TEST_CASE("reduce: CUDA reductions on the emulator match the CPU's, double", "[reduce]") { check_against_cpu<double>(); }

TEST_CASE("reduce: the cut of j covers it in chunks of at least the shortest, one pass when the outputs fill the GPU",
          "[reduce]") {
  for (index_t inner : {index_t{1}, index_t{2}, index_t{33}, index_t{512}, index_t{4096}, index_t{20000}}) {
    for (index_t outer : {index_t{1}, index_t{3}, index_t{64}, index_t{1000}}) {
      for (index_t n : {index_t{0}, index_t{1}, index_t{127}, index_t{256}, index_t{4097}, index_t{100000}, index_t{1} << 22}) {
        INFO("(" << outer << ", " << n << ", " << inner << ")");
        const index_t chunks = reduce_chunks(outer, n, inner);
        const index_t shortest = inner == 1 ? 32 * 256 : 16 * 8;
        const index_t blocks = inner == 1 ? outer : outer * ((inner + 31) / 32);
        CHECK(chunks >= 1);
        CHECK(chunks <= 128);
        if (chunks > 1) {
          CHECK(n / chunks >= shortest);       // every chunk floor(n / chunks) or ceil(n / chunks) long
          CHECK(blocks * (chunks - 1) < 512);  // no more chunks than the GPU wants
        }
        if (blocks >= 512 || n < 2 * shortest) CHECK(chunks == 1);
      }
    }
  }
}

TEST_CASE("reduce: the same bits run to run and under reversed and greedy schedules", "[reduce]") {
  for (const ReduceCase& c : reduce_cases()) {
    INFO(c.name);
    const Problem<float> pr(c);
    check_same_bits_under_schedules([&] { return std::vector<std::vector<float>>{run(c, pr, Kernels::emulated)}; });
  }
}

}  // namespace megacpp::cuda_emulation
