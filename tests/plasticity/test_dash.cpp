// DASH: rows at or below the threshold are bitwise unchanged, the others are multiplied by exactly
// dash_factor(cos); a gradient that does not describe the weight's rows is refused.
#include "plasticity_testing.hpp"

using namespace megacpp;
using namespace megacpp::plasticity;

TEST_CASE("DASH: hand-built rows: cosine above the threshold shrinks by the documented factor", "[plasticity][dash]") {
  // threshold 0.3, min_factor 0.5; rows:
  //   0: cos =  1   -> s = max(0.5, 1 - 0.7) = 0.5 (the bound)
  //   1: cos =  0   -> kept
  //   2: cos = -1   -> kept
  //   3: cos =  0.6 -> s = 1 - (0.6 - 0.3) = 0.7
  //   4: zero gradient -> kept
  const std::vector<float> w{1, 0, 2, 0, 3, 0, 1, 1, 0, 1, 0, 0, 5, 5, 5};
  const std::vector<float> g{2, 0, 4, 1, 0, 0, -1, -1, 0, 0.6f, 0.8f, 0, 0, 0, 0};
  auto wt = Tensor<float, Cpu>::from_host(Shape{5, 3}, w), gt = Tensor<float, Cpu>::from_host(Shape{5, 3}, g);
  const std::vector<index_t> shrunk = dash_rows(wt, gt, all_rows(5));
  CHECK(shrunk == std::vector<index_t>{0, 3});
  const std::vector<float> out = wt.to_host();
  CHECK(out[0] == 0.5f);
  CHECK(out[1] == 0.0f);
  CHECK(out[2] == 1.0f);
  const double cos3 = 0.6f / std::sqrt(double(0.6f) * 0.6f + double(0.8f) * 0.8f);  // 0.6 in float inputs
  CHECK(dash_factor(cos3, DashOptions{}) == Approx(0.7).epsilon(1e-7));
  CHECK(out[9] == static_cast<float>(1.0 * dash_factor(cos3, DashOptions{})));
  for (int j : {3, 4, 5, 6, 7, 8, 10, 11, 12, 13, 14}) CHECK(out[static_cast<std::size_t>(j)] == w[static_cast<std::size_t>(j)]);
}

TEST_CASE("DASH: random rows below the threshold stay bitwise, the others scale exactly", "[plasticity][dash]") {
  const index_t rows = 64, cols = 32;
  auto w = megacpp::testing::random_matrix<float>(rows, cols, 1);
  // gradient = a mix of the row and noise: cosines spread over (-1, 1)
  const std::vector<float> wh = w.to_host();
  Rng rng(2);
  std::vector<float> gh(wh.size());
  for (index_t i = 0; i < rows; ++i) {
    const double mix = -1.0 + 2.0 * double(i) / double(rows - 1);
    for (index_t j = 0; j < cols; ++j)
      gh[static_cast<std::size_t>(i * cols + j)] = static_cast<float>(mix * wh[static_cast<std::size_t>(i * cols + j)] + 0.5 * rng.normal());
  }
  auto g = Tensor<float, Cpu>::from_host(Shape{rows, cols}, gh);
  const DashOptions o{.threshold = 0.2, .min_factor = 0.6};
  const auto shrunk = dash_rows(w, g, all_rows(rows), o);
  const std::vector<float> out = w.to_host();
  index_t count = 0;
  for (index_t i = 0; i < rows; ++i) {
    double wg = 0, ww = 0, gg = 0;
    for (index_t j = 0; j < cols; ++j) {
      const auto k = static_cast<std::size_t>(i * cols + j);
      wg += double(wh[k]) * gh[k];
      ww += double(wh[k]) * wh[k];
      gg += double(gh[k]) * gh[k];
    }
    const double cos = wg / std::sqrt(ww * gg), s = dash_factor(cos, o);
    CHECK((s >= 0.6 && s <= 1.0));
    for (index_t j = 0; j < cols; ++j) {
      const auto k = static_cast<std::size_t>(i * cols + j);
      if (cos > o.threshold) CHECK(out[k] == static_cast<float>(double(wh[k]) * s));
      else CHECK(out[k] == wh[k]);  // bitwise: the same float
    }
    count += cos > o.threshold ? 1 : 0;
  }
  CHECK(static_cast<index_t>(shrunk.size()) == count);
  CHECK(count > 5);
  CHECK(count < rows - 5);
}

TEST_CASE("DASH: the gradient must describe the weight's owned rows", "[plasticity][dash]") {
  auto w = megacpp::testing::random_matrix<float>(6, 4, 1);
  auto g = megacpp::testing::random_matrix<float>(4, 4, 2);
  CHECK_THROWS_WITH(dash_rows(w, g, RowRange{0, 6}), Catch::Contains("does not describe the weight's owned rows"));
  auto g6 = megacpp::testing::random_matrix<float>(6, 4, 2);
  CHECK_THROWS_WITH(dash_rows(w, g6, RowRange{0, 5}), Catch::Contains("owned range [0, 5)"));
  CHECK_THROWS_WITH(dash_rows(w, Tensor<float, Cpu>{}, RowRange{0, 6}), Catch::Contains("(none)"));
  CHECK_THROWS_WITH(dash_rows(w, g6, RowRange{0, 6}, DashOptions{.threshold = 0.3, .min_factor = 0}),
                    Catch::Contains("min_factor"));
}
