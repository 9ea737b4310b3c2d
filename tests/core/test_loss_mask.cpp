// LossMask<T, Cpu>: the host sum and the backend sum agree, bad weights are refused with their
// value and position, and a mask written after its sum was taken is refused where it is used.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "megacpp/megacpp.hpp"

using namespace megacpp;
using Catch::Matchers::Contains;

TEST_CASE("LossMask: from_host and counted give the same sum and divisor", "[loss_mask]") {
  const std::vector<float> weights{1, 0, 1, 1, 0.5f, 0, 1, 1};
  const auto host = LossMask<float, Cpu>::from_host("test", Shape{2, 4}, weights);
  const auto counted = LossMask<float, Cpu>::counted(CpuTensor<float>::from_host({2, 4}, weights));
  CHECK(host.defined());
  CHECK(host.sum() == 5.5);
  CHECK(counted.sum() == 5.5);
  CHECK(host.count_for("op", 8) == 5.5f);
  CHECK(counted.count_for("op", 8) == 5.5f);
  CHECK(host.weights().to_host() == weights);
  CHECK(host.weights().shape() == Shape{2, 4});
  // The host copy travels with a mask made on the host (for MTP's rolling), not with a counted one.
  REQUIRE(host.host() != nullptr);
  CHECK(*host.host() == weights);
  CHECK(counted.host() == nullptr);
  // No mask: every token weighs 1, so the divisor is the number of tokens.
  const LossMask<float, Cpu> none;
  CHECK_FALSE(none.defined());
  CHECK(none.data() == nullptr);
  CHECK(none.count_for("op", 7) == 7.0f);
  CHECK_FALSE(LossMask<float, Cpu>::counted(CpuTensor<float>()).defined());
}

TEST_CASE("LossMask: bad weights, a wrong size, an all-masked batch and a stale sum are refused", "[loss_mask][errors]") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  CHECK_THROWS_WITH((LossMask<double, Cpu>::from_host("loader", Shape{3}, {1, -1, 1})),
                    Contains("loader: loss_mask weight -1 at [1] is not a finite value >= 0"));
  CHECK_THROWS_WITH((LossMask<double, Cpu>::from_host("loader", Shape{3}, {1, 1, nan})), Contains("weight nan at [2]"));
  CHECK_THROWS_WITH((LossMask<double, Cpu>::from_host("loader", Shape{2}, {inf, 1})), Contains("weight inf at [0]"));
  CHECK_THROWS_WITH((LossMask<double, Cpu>::from_host("loader", Shape{2}, {1, 1, 1})), Contains("from_host"));
  const auto mask = LossMask<double, Cpu>::from_host("loader", Shape{4}, {1, 0, 1, 1});
  CHECK_THROWS_WITH(mask.count_for("head", 5), Contains("head: loss_mask (4) holds 4 weights for 5 tokens"));
  CHECK_THROWS_WITH((LossMask<double, Cpu>::from_host("loader", Shape{3}, {0, 0, 0}).count_for("head", 3)),
                    Contains("head: every token is masked (loss_mask sums to 0 over 3 tokens)"));
  // A weight from backend memory that is not finite shows in the sum.
  CHECK_THROWS_WITH((LossMask<double, Cpu>::counted(CpuTensor<double>::from_host({2}, {1, nan})).count_for("head", 2)),
                    Contains("head: loss_mask sums to nan over 2 tokens: a weight is not finite"));
  // Written through any copy of the tensor after the sum was taken: refused, never divided by a stale sum.
  auto weights = CpuTensor<double>::from_host({3}, {1, 1, 1});
  const auto stale = LossMask<double, Cpu>::counted(weights);
  CHECK(stale.count_for("head", 3) == 3.0);
  weights.data()[0] = 0;
  CHECK_THROWS_WITH(stale.count_for("head", 3), Contains("head: loss_mask was written after its sum was taken"));
}
