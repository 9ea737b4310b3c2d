// Data parallelism (megacpp/dist/data_parallel.hpp) over the in-process fake: world 2 x micro-batch b
// gives the losses and parameters of world 1 x accumulation 2 x micro-batch b, bitwise; buckets
// start during backward; the gradient-ready hook fires once per leaf, after its last use.
#include <catch2/catch.hpp>

#include <thread>
#include <vector>

#include "dp_model.hpp"

using namespace megacpp;

TEST_CASE("Var::on_grad_ready fires once per backward, after every contribution", "[dist][hook]") {
  auto x = Var<double, Cpu>::parameter(Tensor<double, Cpu>::from_host({2}, {1.0, 2.0}));
  std::vector<double> seen;
  x.on_grad_ready([&] { seen.push_back(x.grad().to_host()[0]); });
  auto y = exp(x);
  backward(sum(mul(x, x) + y * x));  // x used three times: 2x + e^x (1 + x)
  REQUIRE(seen.size() == 1);
  CHECK(seen[0] == Approx(2.0 + std::exp(1.0) * 2.0).epsilon(1e-14));
  x.on_grad_ready({});
  backward(sum(x));
  CHECK(seen.size() == 1);
}

TEST_CASE("DataParallel: world 2 x micro b == world 1 x accumulation 2 x micro b, bitwise", "[dist][data_parallel]") {
  constexpr int kSteps = 5;
  constexpr index_t kMicro = 8;
  dist::SingleProcess single;
  const dp_test::Result one = dp_test::train(single, kSteps, 2, kMicro, 1 << 20);
  for (std::size_t bucket_bytes : {std::size_t{64}, std::size_t{25} << 20}) {  // one bucket per param; one bucket
    dist::InProcessGroup group(2);
    std::vector<dp_test::Result> two(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&group, &two, r, bucket_bytes] {
        dist::InProcessComm comm = group.comm(r);
        two[static_cast<std::size_t>(r)] = dp_test::train(comm, kSteps, 1, kMicro, bucket_bytes);
      });
    for (auto& t : threads) t.join();
    INFO("bucket bytes " << bucket_bytes);
    CHECK(two[0].params == two[1].params);  // the ranks agree
    CHECK(two[0].losses == one.losses);
    CHECK(two[0].params == one.params);
  }
  CHECK(one.losses.back() < one.losses.front());  // it trains
}

TEST_CASE("DataParallel: buckets are started from backward hooks", "[dist][data_parallel]") {
  dp_test::Net net(1);
  dist::SingleProcess comm;
  dist::DataParallel<float, Cpu, dist::SingleProcess> dp(comm, net.params(), {.bucket_bytes = 64});
  CHECK(dp.buckets() == 3);
  const auto [x, y] = dp_test::batch(0, 4);
  backward(net.loss(x, y));
  dp.finish();
  CHECK(dp.buckets_started_in_backward() == 3);
  dp.set_sync(false);
  backward(net.loss(x, y));
  dp.set_sync(true);
  backward(net.loss(x, y));
  dp.finish();
  CHECK(dp.buckets_started_in_backward() == 3);
}

TEST_CASE("DataParallel: bad input is refused", "[dist][data_parallel]") {
  dist::SingleProcess comm;
  auto constant = Var<float, Cpu>(Tensor<float, Cpu>::zeros(Shape{2}));
  CHECK_THROWS_WITH((dist::DataParallel<float, Cpu, dist::SingleProcess>(comm, {constant})),
                    Catch::Matchers::Contains("not a leaf that requires a gradient"));
  dp_test::Net net(1);
  CHECK_THROWS_WITH((dist::DataParallel<float, Cpu, dist::SingleProcess>(comm, net.params(), {.bucket_bytes = 0})),
                    Catch::Matchers::Contains("bucket_bytes must be > 0"));
}
