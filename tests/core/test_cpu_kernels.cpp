// CPU backend kernels against naive references, and their determinism across thread counts.
#include <catch2/catch.hpp>

#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

#include "megacpp/megacpp.hpp"

using namespace megacpp;

namespace {
std::vector<double> random_vector(std::size_t n, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<double> v(n);
  for (auto& x : v) x = rng.normal();
  return v;
}
}  // namespace

TEST_CASE("Cpu::reduce and map broadcast semantics", "[kernels]") {
  // x (2, 3, 4): sum over the middle axis, and x + bias(4).
  std::vector<double> x(24);
  for (int i = 0; i < 24; ++i) x[i] = i;
  std::vector<double> y(8);
  Cpu::reduce<double>(2, 3, 4, fn::Identity{}, 1.0, 0.0, y.data(), In<double>{x.data()});
  CHECK(y == std::vector<double>{12, 15, 18, 21, 48, 51, 54, 57});
  const std::vector<double> bias{100, 200, 300, 400};
  std::vector<double> out(24);
  Cpu::map<double>(6, 4, fn::Add{}, out.data(), In<double>{x.data()}, In<double>{bias.data(), true});
  CHECK(out[5] == 5 + 200);
  CHECK(out[23] == 23 + 400);
}

TEST_CASE("Cpu::softmax gives 0 on a fully masked row, never NaN", "[kernels]") {
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> x{-inf, -inf, -inf, 0.0, -inf, 0.0};
  std::vector<double> y(6);
  Cpu::softmax<double>(2, 3, x.data(), y.data());
  CHECK(y == std::vector<double>{0, 0, 0, 0.5, 0, 0.5});
}

TEST_CASE("Cpu::transpose swaps two axes", "[kernels]") {
  // (2, 3, 4) swap axes 0 and 2 -> (4, 3, 2)
  std::vector<double> x(24), y(24);
  for (int i = 0; i < 24; ++i) x[i] = i;
  Cpu::transpose<double>(1, 2, 3, 4, 1, x.data(), 0.0, y.data());
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b)
      for (int c = 0; c < 4; ++c) REQUIRE(y[(c * 3 + b) * 2 + a] == x[(a * 3 + b) * 4 + c]);
}

TEST_CASE("Cpu::scatter_add_rows accumulates repeated indices", "[kernels]") {
  const std::vector<std::int32_t> idx{2, 0, 2, 2};
  std::vector<double> g(4 * 3), table(3 * 3, 0.0);
  for (int i = 0; i < 12; ++i) g[i] = i;
  Cpu::scatter_add_rows<double>(4, 3, g.data(), idx.data(), table.data());
  CHECK(table == std::vector<double>{3, 4, 5, 0, 0, 0, 0 + 6 + 9, 1 + 7 + 10, 2 + 8 + 11});
}

TEST_CASE("Row kernels give bitwise the same result on 1 and 2 threads", "[kernels][determinism]") {
  const index_t rows = 512, cols = 1000;
  const auto xd = random_vector(static_cast<std::size_t>(rows * cols), 9);
  const std::vector<float> x(xd.begin(), xd.end());
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    std::vector<float> colsum(cols), sm(x.size()), norm(x.size()), rstd(rows), ggain(cols, 0.0f);
    Cpu::reduce<float>(1, rows, cols, fn::Identity{}, 1.0f, 0.0f, colsum.data(), In<float>{x.data()});
    Cpu::softmax<float>(rows, cols, x.data(), sm.data());
    Cpu::rmsnorm<float>(rows, cols, x.data(), nullptr, 1e-6f, norm.data(), rstd.data());
    Cpu::rmsnorm_backward<float>(rows, cols, x.data(), nullptr, rstd.data(), x.data(), nullptr, ggain.data());
    colsum.insert(colsum.end(), sm.begin(), sm.end());
    colsum.insert(colsum.end(), norm.begin(), norm.end());
    colsum.insert(colsum.end(), ggain.begin(), ggain.end());
    return colsum;
  };
  const auto one = run(1);
  const auto two = run(2);
  omp_set_num_threads(2);
  REQUIRE(one.size() == two.size());
  for (std::size_t i = 0; i < one.size(); ++i) REQUIRE(std::memcmp(&one[i], &two[i], sizeof(float)) == 0);
}
