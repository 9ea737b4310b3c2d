// pass@k (Chen et al. 2021) against values computed by hand from the binomials, and the stable
// product against the direct ratio of binomials on larger n.
#include <catch2/catch.hpp>

#include "megacpp/core/error.hpp"
#include "megacpp/eval/pass_at_k.hpp"

using megacpp::eval::pass_at_k;
using megacpp::eval::pass_at_k_binomial;

TEST_CASE("pass@k equals hand-computed values", "[eval][pass_at_k]") {
  CHECK(pass_at_k(10, 0, 1) == 0.0);
  CHECK(pass_at_k(10, 10, 1) == 1.0);
  CHECK(pass_at_k(10, 3, 1) == Approx(0.3).epsilon(1e-15));          // c / n
  CHECK(pass_at_k(5, 1, 2) == Approx(1.0 - 6.0 / 10.0).epsilon(1e-15));  // 1 - C(4,2)/C(5,2)
  CHECK(pass_at_k(10, 3, 5) == Approx(1.0 - 21.0 / 252.0).epsilon(1e-15));  // 1 - C(7,5)/C(10,5)
  CHECK(pass_at_k(200, 1, 100) == Approx(0.5).epsilon(1e-15));       // 1 - C(199,100)/C(200,100) = 100/200
  CHECK(pass_at_k(10, 8, 5) == 1.0);                                   // n - c < k: every draw has a pass
  CHECK(pass_at_k(10, 0, 10) == 0.0);
  CHECK(pass_at_k(10, 1, 10) == 1.0);
}

TEST_CASE("pass@k's product agrees with the ratio of binomials", "[eval][pass_at_k]") {
  for (const std::int64_t n : {1, 7, 20, 100, 1000})
    for (std::int64_t c = 0; c <= n; c += std::max<std::int64_t>(1, n / 13))
      for (std::int64_t k = 1; k <= n; k += std::max<std::int64_t>(1, n / 7))
        CHECK(pass_at_k(n, c, k) == Approx(pass_at_k_binomial(n, c, k)).margin(1e-12));
}

TEST_CASE("pass@k refuses impossible counts", "[eval][pass_at_k]") {
  CHECK_THROWS_AS(pass_at_k(0, 0, 1), megacpp::Error);
  CHECK_THROWS_AS(pass_at_k(5, 6, 1), megacpp::Error);
  CHECK_THROWS_AS(pass_at_k(5, -1, 1), megacpp::Error);
  CHECK_THROWS_WITH(pass_at_k(5, 1, 10), Catch::Contains("k = 10") && Catch::Contains("n >= k"));
  CHECK_THROWS_AS(pass_at_k(5, 1, 0), megacpp::Error);
}

TEST_CASE("reportable k are those every task has samples for", "[eval][pass_at_k]") {
  CHECK(megacpp::eval::reportable_ks(1) == std::vector<std::int64_t>{1});
  CHECK(megacpp::eval::reportable_ks(10) == std::vector<std::int64_t>{1, 2, 5, 10});
  CHECK(megacpp::eval::reportable_ks(0).empty());
}
